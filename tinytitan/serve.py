"""``tinytitan serve``: the engine, the protocols and the HTTP server, started together and stopped together."""

from __future__ import annotations

import errno
import functools
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path

from .banner import banner, codex_catalog
from .model_setup import join_group, make_backends

log = logging.getLogger("tinytitan")
FORCED_STOP_S = 5.0  # after the first Ctrl-C, the longest the graceful shutdown may take
GRACEFUL_S = 1.0  # on Ctrl-C: what a request in flight, or an idle keep-alive connection, gets before it is cut
SOCKET_GRACE_S = 0.75  # what a WebSocket's exchange in flight gets: its close frame goes out before the cut
GENERATION_GRACE_S = 0.5  # what a generation in flight gets to finish; then it ends in its protocol's words
KEEP_ALIVE_S = 15.0
OPEN_FILES = 65536  # the descriptors the server asks for (its soft limit raised toward the hard one)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(args) -> int:
    from .blas import use_fast_blas

    blas = use_fast_blas()  # before anything imports mlx
    log.info("matrix products run on: %s", blas)

    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    from .engine.engine import Engine
    from .http.app import LOOPBACK_HOSTS, Server, ServerConfig
    from .protocols.registry import all_protocols

    if not _is_loopback(args.host):
        if not args.allow_remote:
            print(f"refusing to bind {args.host}: it is not a loopback address. Pass --allow-remote to serve "
                  "other machines (anyone who reaches the port can use the model; consider --api-key).",
                  file=sys.stderr)
            return 2
        log.warning("binding %s: the server is reachable from other machines%s", args.host,
                    "" if args.api_key else " and no --api-key is set")
    origins = allowed_origins(args)  # (a bad one is named before the model loads)
    if args.conversions_mib < 0:
        raise SystemExit("--conversions-mib must be 0 or more")
    from .models import conversions

    conversions.configure(args.conversions_mib << 20)
    group = args.group = join_group(args)
    if group is None or group.leader:  # (a follower rank never listens: rank 0 binds HTTP)
        check_bind(args.host, args.port)  # a port in use, or a host that is no address, before the model loads
    backends = make_backends(args)
    max_batch = args.max_batch
    if getattr(args, "kv_bits", None) is not None and max_batch > 1 and not args.script:
        log.info("--kv-bits %d: requests decode one at a time (mlx-lm's batch holds no quantized KV cache)",
                 args.kv_bits)
        max_batch = 1
    if group is not None and not group.leader:  # a follower runs only the model's steps (lockstep.py)
        from .engine.group.ranks import GroupBroken
        from .engine.group.follower import follow

        try:
            follow(group, backends, max_batch, getattr(args, "group_timeout", None))
        except GroupBroken as exc:
            log.error("rank %d stops: %s", group.rank, exc)
            return 1
        return 0
    protocols = all_protocols(Path(args.spec_dir) if args.spec_dir else None)
    engine = Engine(backends, max_queue=args.max_queue, max_batch=max_batch, group=group,
                    group_timeout=args.group_timeout, stream_interval=args.stream_interval / 1000)
    if group is not None:
        for r in group.describe()["ranks"]:
            log.info("group of %d (%s backend): rank %d on %s holds %s", group.size, group.backend, r["rank"],
                     r["host"], r["holds"])
    memory = open_memory(args)
    if memory is not None:
        from .memory.layer import MemoryEngine

        engine = MemoryEngine(engine, memory)
    allowed = tuple(LOOPBACK_HOSTS) + tuple(h.lower() for h in args.allowed_host)
    if args.host not in ("0.0.0.0", "::"):  # the bound address (a loopback one too: 127.0.0.2), as a Host names it
        allowed += (f"[{args.host.lower()}]" if ":" in args.host else args.host.lower(),)
    from .store.db import StateUnavailable

    try:  # (the Responses store opens its database here)
        server = Server(engine, protocols, ServerConfig(api_key=args.api_key, allowed_hosts=allowed,
                                                        responses_store=args.responses_store or args.state,
                                                        responses_retention_days=args.responses_retention_days,
                                                        responses_max_mib=args.responses_max_mib,
                                                        websocket=not args.no_websocket,
                                                        allowed_origins=origins,
                                                        max_websockets=args.max_websockets,
                                                        fetch_images=args.fetch_images))
    except StateUnavailable as exc:
        raise SystemExit(f"tinytitan: {exc}") from None

    catalog = codex_catalog(engine)
    config = Config()
    host = f"[{args.host}]" if ":" in args.host and not args.host.startswith("[") else args.host
    config.bind = [f"{host}:{args.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through our log format, once
    # an idle connection is closed after this long; so is one the client closed after its answer, which
    # hypercorn holds until then (http/wire.py): short, so one-request clients (curl, health checks) do not pile
    # up descriptors, and longer than the SDKs' own idle expiry (httpx 5 s, undici 4 s), which then close first
    config.keep_alive_timeout = KEEP_ALIVE_S
    raise_open_files()
    # a WebSocket frame may be as large as a request body (the server refuses larger ones in band, then goes on);
    # a ping every 20 s keeps an idle agent's socket from being dropped by anything in between
    config.websocket_max_message_size = server.config.max_body_bytes + (1 << 20)
    config.websocket_ping_interval = 20.0
    config.graceful_timeout = GRACEFUL_S  # (an idle keep-alive connection, which every agent holds, waits this long)

    stopping = trio.Event()

    async def watch_signals(nursery: trio.Nursery) -> None:
        """Ctrl-C or SIGTERM, taken as a signal rather than a KeyboardInterrupt: an interrupt raised inside
        a connection's task can be swallowed by the HTTP server, which then serves on. After the first, a
        graceful shutdown (in-flight requests get hypercorn's graceful_timeout); a second Ctrl-C, or
        FORCED_STOP_S after the first, forces it: a client that holds a stream without reading it keeps the
        HTTP server's (shielded, uncancellable) send waiting for ever, and the graceful shutdown with it."""
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                server.stopping.begin(SOCKET_GRACE_S)  # open WebSockets are closed with 1001, not cut (1006)
                # generations still running then end with an error event (a stream cut without one reads as a
                # broken network; the WebSocket's exchange and the HTTP stream alike end first)
                nursery.start_soon(engine.wind_down, GENERATION_GRACE_S)
                stopping.set()
                break
            with trio.move_on_after(FORCED_STOP_S):
                async for signum in signals:
                    log.warning("%s again: stopping now", signal.Signals(signum).name)
                    break
            if memory is not None:
                try:
                    memory.close()
                except Exception:  # noqa: BLE001 (stopping regardless)
                    log.exception("closing the memory store")
            logging.shutdown()
            os._exit(130)

    async def main():
        async with trio.open_nursery() as outer:
            outer.start_soon(watch_signals, outer)
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(functools.partial(hypercorn_serve, server.app, config,
                                                              shutdown_trigger=stopping.wait))
                base = binds[0] if binds else f"http://{host}:{args.port}"
                print(banner(base.replace("0.0.0.0", "127.0.0.1"), engine.model_id, args.api_key,
                             engine.model_info(engine.model_id), catalog), flush=True)
            outer.cancel_scope.cancel()  # served and shut down: no more signals to watch

    try:
        trio.run(main)
    except BaseException as exc:
        if not interrupted(exc):
            refused = bind_error(exc)
            if refused is not None:  # (taken between the check and the bind)
                raise SystemExit(f"tinytitan: cannot listen on {host}:{args.port}: {refused}") from None
            raise
    finally:
        if memory is not None:
            memory.close()
    return 0


def raise_open_files() -> None:
    """The soft limit on open descriptors raised to the hard one (at most OPEN_FILES), as Go's runtime does:
    every connection is one, and a common default soft limit (1024) is a few seconds of one-request clients."""
    try:
        import resource
    except ImportError:  # (not on Windows)
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES)
    for ask in (want, min(want, 10240)):  # (macOS refuses more than kern.maxfilesperproc; 10240 is its OPEN_MAX)
        if soft == resource.RLIM_INFINITY or soft >= ask:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ask, hard))
            return
        except (ValueError, OSError) as exc:
            log.debug("open files stay at %d, not %d: %s", soft, ask, exc)


def check_bind(host: str, port: int) -> None:
    """Stop, in one line, before the model loads, where the server could not listen: the port is taken (another
    server), the host is no address of this machine, or it names no address at all."""
    import socket

    bare = host.strip("[]")
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise SystemExit(f"tinytitan: cannot listen on {host}:{port}: --host {host} is not an address of this "
                         f"machine ({exc})") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as the server's own socket)
        try:
            s.bind(addr)
        except OSError as exc:
            hint = " (another server? pass --port)" if exc.errno == errno.EADDRINUSE else ""
            raise SystemExit(f"tinytitan: cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None


BIND_ERRORS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)


def bind_error(exc: BaseException) -> OSError | None:
    """The OSError of a failed bind, bare or inside the exception groups trio's nurseries raise."""
    if isinstance(exc, OSError):
        return exc if exc.errno in BIND_ERRORS else None
    for inner in getattr(exc, "exceptions", None) or ():
        found = bind_error(inner)
        if found is not None:
            return found
    return None


def allowed_origins(args) -> tuple[str, ...]:
    """The web origins allowed beyond loopback's and the server's own: ``--allowed-origin`` and
    ``TINYTITAN_ALLOWED_ORIGINS``, each checked (a bad one stops the server, named)."""
    from .http.origins import ENV_VAR, allow_list

    given = [*args.allowed_origin, os.environ.get(ENV_VAR, "")]
    try:
        origins = allow_list(given)
    except ValueError as exc:
        raise SystemExit(f"--allowed-origin / {ENV_VAR}: {exc}") from None
    if "*" in origins:
        log.warning("every web origin is allowed: any page open in a browser here can use the model")
    return tuple(str(o) for o in origins)


def open_memory(args):
    """The memory layer's store, or None when memory is off (then nothing of it is imported)."""
    if not args.memory:
        return None
    if args.memory_tool_rounds < 0:
        raise SystemExit("--memory-tool-rounds must be 0 or more")
    from .memory.service import Memory, MemoryConfig

    from .store.db import db_path

    config = MemoryConfig(tools=args.memory_tools, rounds=args.memory_tool_rounds,
                          consolidate=max(args.memory_consolidate, 0.0),
                          max_workspaces=max(args.memory_max_workspaces, 0))
    if args.memory_dir:
        config.directory = Path(args.memory_dir).expanduser()
        config.state = str(config.directory)
    else:  # the state database (older journals are migrated from the default memory directory)
        config.state = args.state or str(db_path(None))
    memory = Memory(config)
    log.info("memory on: %s (tools %s, %d rounds per request)", memory.db.where, config.tools, config.rounds)
    return memory


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, bare or inside the exception groups trio's nurseries raise."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    inner = getattr(exc, "exceptions", None)
    return bool(inner) and all(interrupted(e) for e in inner)

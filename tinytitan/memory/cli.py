"""``tinytitan memory …``: see and correct what memory holds.

    projects                 every workspace with memory: id, records, directory
    list WS [PREFIX]         its keys with one-line summaries
    show WS KEY              one memory in full
    delete WS KEY            delete one
    forget WS --yes          delete the workspace's whole memory

WS is a workspace id as ``projects`` prints it, or the workspace's absolute directory. The database is the one
a server uses (``--state``, ``--memory-dir``, as for ``serve``); it works while servers run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .keys import Refused, parse_segment
from .scope import NAMESPACE, default_dir, normalise, os_user, workspace_id


def add_parser(sub) -> None:
    m = sub.add_parser("memory", help="see and correct what the model's memory holds")
    m.add_argument("--state", default=os.environ.get("TINYTITAN_STATE") or None, metavar="DIR|postgresql://…",
                   help="the state database (as for serve; env TINYTITAN_STATE)")
    m.add_argument("--memory-dir", help=f"memory's own database directory, as for serve (older journals under it, "
                                        f"default {default_dir()}, are migrated)")
    m.add_argument("--namespace", default=NAMESPACE)
    m.add_argument("--user", help="whose memory (default: the OS user)")
    ops = m.add_subparsers(dest="memory_command", required=True)
    ops.add_parser("projects", help="every workspace with memory")
    p = ops.add_parser("list", help="a workspace's keys, with summaries")
    p.add_argument("workspace")
    p.add_argument("prefix", nargs="?", default="")
    p = ops.add_parser("show", help="one memory in full")
    p.add_argument("workspace")
    p.add_argument("key")
    p = ops.add_parser("delete", help="delete one memory")
    p.add_argument("workspace")
    p.add_argument("key")
    p = ops.add_parser("forget", help="delete a workspace's whole memory")
    p.add_argument("workspace")
    p.add_argument("--yes", action="store_true", help="really")


class Failure(Exception):
    pass


def open_memory(args):
    """The memory a server with these arguments would use (older journals migrated first)."""
    from .service import Memory, MemoryConfig

    config = MemoryConfig(namespace=parse_segment(args.namespace, "namespace"),
                          user=parse_segment(args.user or os_user(), "user"), consolidate=0)
    if args.memory_dir:
        config.directory = Path(args.memory_dir).expanduser()
        config.state = str(config.directory)
    else:
        from ..store.db import db_path

        config.state = args.state if args.state else str(db_path(None))
    return Memory(config)


def scope_of(memory, args) -> str:
    ws = args.workspace
    if ws.startswith("/"):
        path = normalise(ws)
        if path is None:
            raise Failure(f"{ws!r} is not a usable directory path")
        ws = workspace_id(path)
    scope = f"{memory.config.namespace}/{memory.user}/{parse_segment(ws, 'workspace')}"
    if memory.db.run(lambda tx: tx.row("SELECT 1 FROM memory_workspaces WHERE scope = ?", (scope,)),
                     write=False) is None:
        raise Failure(f"no memory for workspace {args.workspace} (see 'tinytitan memory projects')")
    return scope


def run(args, out=None) -> int:
    try:
        return _run(args, out or sys.stdout)
    except (Failure, Refused) as exc:
        print(f"tinytitan memory: {exc}", file=sys.stderr)
        return 1


def _run(args, out) -> int:
    from .workspace import Workspace

    memory = open_memory(args)
    try:
        return _command(args, out, memory, Workspace)
    finally:
        memory.close()


def _command(args, out, memory, Workspace) -> int:
    cmd = args.memory_command
    if cmd == "projects":
        prefix = f"{memory.config.namespace}/{memory.user}/"
        rows = memory.db.run(lambda tx: tx.rows(
            "SELECT w.scope, w.path, (SELECT count(*) FROM memory_records r WHERE r.scope = w.scope) "
            "FROM memory_workspaces w WHERE substr(w.scope, 1, ?) = ? ORDER BY w.scope", (len(prefix), prefix)),
            write=False)
        lines = [f"{scope[len(prefix):]}\t{n} records\t{path or '?'}" for scope, path, n in rows]
        print("\n".join(lines) if lines else f"no memory for {prefix.rstrip('/')} in {memory.db.where}", file=out)
        return 0
    ws = Workspace(memory.db, scope_of(memory, args))
    if cmd == "list":
        for rec in ws.list(args.prefix, brief=True):
            print(f"{rec.key}\t{rec.importance}\t{rec.summary}", file=out)
        return 0
    if cmd == "show":
        rec = ws.get(args.key)
        if rec is None:
            raise Failure(f"no memory under the key {args.key!r}")
        print(json.dumps(rec.full(), ensure_ascii=False, indent=2), file=out)
        return 0
    if cmd == "delete":
        if not ws.delete(args.key):
            raise Failure(f"no memory under the key {args.key!r}")
        # and the listings kept for its conversations: else one that showed the key shows it again after a
        # restart (a person deletes a wrong fact or a secret saved by mistake: its next turn reads memory anew)
        memory.db.run(lambda tx: memory.drop_fragments(tx, ws.scope))
        print(f"deleted {args.key}", file=out)
        return 0
    if cmd == "forget":
        if not args.yes:
            raise Failure("forget deletes every memory of the workspace: add --yes")

        def forget(tx):
            n = tx.exec("DELETE FROM memory_records WHERE scope = ?", (ws.scope,))
            tx.exec("DELETE FROM memory_workspaces WHERE scope = ?", (ws.scope,))
            # and the conversation waiting to be consolidated: else its facts are written back once it is quiet
            tx.exec("DELETE FROM memory_transcripts WHERE scope = ?", (ws.scope,))
            memory.drop_fragments(tx, ws.scope)  # and the listings kept for its conversations
            return n

        print(f"forgot {memory.db.run(forget)} records", file=out)
        return 0
    raise Failure(f"unknown command {cmd}")

"""``tinytitan memory …``: see and correct what memory holds.

    projects                 every workspace with memory: id, records, directory, whether a server holds it
    list WS [PREFIX]         its keys with one-line summaries
    show WS KEY              one memory in full
    delete WS KEY            delete one (refused while a server holds the workspace)
    forget WS --yes          delete the whole journal (refused while a server holds the workspace)

WS is a workspace id as ``projects`` prints it, or the workspace's absolute directory. Reads never lock: they
work while a server runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from .journal import JOURNAL, Journal
from .keys import Refused, parse_segment
from .scope import NAMESPACE, default_dir, normalise, os_user, workspace_id


def add_parser(sub) -> None:
    m = sub.add_parser("memory", help="see and correct what the model's memory holds")
    m.add_argument("--memory-dir", help=f"the memory directory (default {default_dir()})")
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


def user_dir(args) -> Path:
    base = Path(args.memory_dir).expanduser() if args.memory_dir else default_dir()
    return base / parse_segment(args.namespace, "namespace") / parse_segment(args.user or os_user(), "user")


def workspace_dir(args) -> Path:
    ws = args.workspace
    if ws.startswith("/"):
        path = normalise(ws)
        if path is None:
            raise Failure(f"{ws!r} is not a usable directory path")
        ws = workspace_id(path)
    d = user_dir(args) / parse_segment(ws, "workspace")
    if not (d / JOURNAL).is_file():
        raise Failure(f"no memory for workspace {args.workspace} (see 'tinytitan memory projects')")
    return d


def held(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


@contextmanager
def writer(path: Path):
    """The journal for writing, refused while a server holds it."""
    j = Journal.open(path)
    try:
        if not j.persistent:
            raise Failure(f"a server holds this workspace's memory ({j.why_not}); stop it first")
        yield j
    finally:
        j.close()


def run(args, out=None) -> int:
    try:
        return _run(args, out or sys.stdout)
    except (Failure, Refused) as exc:
        print(f"tinytitan memory: {exc}", file=sys.stderr)
        return 1


def _run(args, out) -> int:
    cmd = args.memory_command
    if cmd == "projects":
        root = user_dir(args)
        rows = []
        for d in sorted(root.iterdir()) if root.is_dir() else []:
            if (d / JOURNAL).is_file():
                j = Journal.read(d / JOURNAL)
                rows.append(f"{d.name}\t{len(j.records)} records\t{j.workspace_path or '?'}"
                            f"{chr(9) + '(held by a server)' if held(d / JOURNAL) else ''}")
        print("\n".join(rows) if rows else f"no memory under {root}", file=out)
        return 0
    journal_path = workspace_dir(args) / JOURNAL
    if cmd == "list":
        for rec in Journal.read(journal_path).list(args.prefix):
            print(f"{rec.key}\t{rec.importance}\t{rec.summary}", file=out)
        return 0
    if cmd == "show":
        rec = Journal.read(journal_path).get(args.key)
        if rec is None:
            raise Failure(f"no memory under the key {args.key!r}")
        print(json.dumps(rec.full(), ensure_ascii=False, indent=2), file=out)
        return 0
    if cmd == "delete":
        with writer(journal_path) as j:
            if not j.delete(args.key):
                raise Failure(f"no memory under the key {args.key!r}")
        print(f"deleted {args.key}", file=out)
        return 0
    if cmd == "forget":
        if not args.yes:
            raise Failure("forget deletes every memory of the workspace: add --yes")
        with writer(journal_path) as j:
            n = len(j.records)
            journal_path.unlink()
        try:
            journal_path.parent.rmdir()
        except OSError:
            pass
        print(f"forgot {n} records", file=out)
        return 0
    raise Failure(f"unknown command {cmd}")

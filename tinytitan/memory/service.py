"""Memory for a server: its settings, the journals it holds (one per workspace), and per-request sessions.

Rules:
- The journal of a scope lives at ``<dir>/<namespace>/<user>/<workspace id>/journal.ndjson``; every directory
  the server creates under ``<dir>`` is the owner's only (0700).
- A workspace's journal is opened (locked, replayed) the first time a request needs it; the launch
  directory's is opened at start. At most ``max_open`` journals are open: past that, the least recently used
  one that no request holds is closed (its lock released), and opened again (replayed) when a request needs it.
  A request holds its journal from its session's start to its end (``hold``); while every open journal is
  held, one more is opened beyond the cap and the log says so.
- A forced call (``tool_choice`` required, Anthropic's ``any``, a tool by name, ``allowed_tools``) is the
  client's: that request is offered no memory tools, so no memory call can stand in for the call it forces;
  its fragment says memory is shown, not reachable, and is not kept for the conversation.
- A session is one request's view: its scope, its journal, the tools offered and the bootstrap fragment.
- A conversation (known by its system prompt and first turn) keeps the fragment of its first request for its
  later ones, so a write does not move its prompt prefix (and defeat the prompt cache); a new conversation
  gets the listing as it is now.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..chat_request import ChatRequest, Message, Tool
from . import fragment, tools
from .journal import JOURNAL, Journal
from .scope import NAMESPACE, Scope, default_dir, derive, os_user

log = logging.getLogger("tinytitan.memory")


@dataclass
class MemoryConfig:
    directory: Path = field(default_factory=default_dir)
    tools: str = "full"  # off | minimal | full
    fsync: bool = False
    rounds: int = 4  # memory tool rounds per request
    namespace: str = NAMESPACE
    user: str | None = None  # None: the OS user
    launch_dir: str = field(default_factory=os.getcwd)
    max_records: int = fragment.MAX_RECORDS
    max_bytes: int = fragment.MAX_BYTES
    barrier_delay: float = 1.0
    consolidate: float = 30.0  # seconds a workspace is quiet before its conversation is consolidated; 0: never
    home: str | None = None  # None: the user's home (refused as a workspace, with its parent)
    max_open: int = 64  # journals open at once (each holds a file and a lock); idle ones are closed beyond it


def journal_path(directory: Path, scope: Scope) -> Path:
    return Path(directory, *scope.parts, JOURNAL)


def make_private_dirs(root: Path, parts: tuple[str, ...]) -> None:
    """``root`` and each of ``parts`` below it, created 0700 (existing ones are left as they are)."""
    for depth in range(len(parts) + 1):
        path = root.joinpath(*parts[:depth])
        if not path.exists():
            path.mkdir(parents=True, exist_ok=True, mode=0o700)


FRAGMENTS_KEPT = 256  # conversations whose bootstrap fragment is remembered


def opening(req: ChatRequest) -> str:
    """A conversation's identity: its system prompt and first turn, which its later requests repeat unchanged."""
    first = [m for m in req.messages if m.role == "system"][:1] + [m for m in req.messages if m.role != "system"][:1]
    digest = hashlib.sha256()
    for m in first:
        digest.update(f"{m.role}\0{m.content}\0".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def forced(req: ChatRequest) -> bool:
    """The request forces a call (or limits calls to tools it names): only a client tool may answer it."""
    return req.tool_choice == "required" or bool(req.tool_names)


class MemorySession:
    def __init__(self, scope: Scope, journal: Journal, config: MemoryConfig, fragment_text: str | None = None,
                 offer_tools: bool = True):
        self.scope = scope
        self.journal = journal
        self.tools: tuple[Tool, ...] = tools.definitions(config.tools) if offer_tools else ()
        self.names = frozenset(t.name for t in self.tools)
        self.rounds = config.rounds
        self.fragment = fragment_text or fragment.bootstrap(journal, os.path.basename(scope.path) or scope.path,
                                                            tuple(t.name for t in self.tools), config.max_records,
                                                            config.max_bytes)

    def augment(self, req: ChatRequest) -> ChatRequest:
        """The fragment at the end of the system prompt, the memory tools after the client's. A client tool of
        the same name keeps its name: the server never runs a call it cannot tell from the client's."""
        msgs = list(req.messages)
        if msgs and msgs[0].role == "system":
            msgs[0] = Message("system", f"{msgs[0].content}\n\n{self.fragment}" if msgs[0].content else self.fragment)
        else:
            msgs.insert(0, Message("system", self.fragment))
        client = {t.name for t in req.tools}
        own = tuple(t for t in self.tools if t.name not in client)
        self.names = frozenset(t.name for t in own)
        return req.with_(messages=tuple(msgs), tools=req.tools + own)

    def run(self, name: str, arguments: str) -> tuple[str, bool]:
        return tools.execute(self.journal, name, arguments)


class Memory:
    def __init__(self, config: MemoryConfig):
        self.config = config
        self.user = config.user or os_user()
        self.journals: OrderedDict[tuple[str, str, str], Journal] = OrderedDict()  # least recently used first
        self.holders: dict[tuple[str, str, str], int] = {}
        self.fragments: OrderedDict[tuple, str] = OrderedDict()
        launch = derive(ChatRequest(model="", messages=()), config.launch_dir, config.namespace, self.user,
                        config.home)
        if launch is not None:
            self.journal(launch)
        log.info("memory on: %s (tools %s, %d rounds per request%s)", config.directory, config.tools, config.rounds,
                 ", fsync on every write" if config.fsync else "")

    def journal(self, scope: Scope) -> Journal:
        """The scope's open journal (opened, or opened again, when it is not), now the most recently used."""
        j = self.journals.get(scope.parts)
        if j is None or j.closed:
            try:
                make_private_dirs(Path(self.config.directory), scope.parts)
            except OSError as exc:
                log.warning("memory directory %s cannot be created: %s", self.config.directory, exc)
            j = Journal.open(journal_path(self.config.directory, scope), scope.path, fsync=self.config.fsync,
                             barrier_delay=self.config.barrier_delay)
            self.journals[scope.parts] = j
            self._evict(keep=scope.parts)
        self.journals.move_to_end(scope.parts)
        return j

    def _evict(self, keep: tuple[str, str, str]) -> None:
        """Close the least recently used journals no request holds, down to ``max_open``."""
        over = len(self.journals) - max(1, self.config.max_open)
        for parts in list(self.journals):
            if over <= 0:
                return
            if parts == keep or self.holders.get(parts):
                continue
            self.journals.pop(parts).close()
            over -= 1
            log.info("memory journal of %s closed (the least recently used of more than %d open)", "/".join(parts),
                     self.config.max_open)
        if over > 0:
            log.warning("memory: %d journals are open, %d over the cap of %d: every one is in use",
                        len(self.journals), over, self.config.max_open)

    @contextmanager
    def hold(self, scope: Scope) -> Iterator[Journal]:
        """The scope's journal, kept open (never evicted) until the block ends."""
        j = self.journal(scope)
        self.holders[scope.parts] = self.holders.get(scope.parts, 0) + 1
        try:
            yield j
        finally:
            left = self.holders[scope.parts] - 1
            if left:
                self.holders[scope.parts] = left
            else:
                del self.holders[scope.parts]

    def session(self, req: ChatRequest) -> MemorySession | None:
        if not req.memory or req.fast or req.prompt is not None:  # a raw prompt has no system turn, no tools
            return None
        scope = derive(req, self.config.launch_dir, self.config.namespace, self.user, self.config.home)
        if scope is None:
            return None
        if forced(req):
            return MemorySession(scope, self.journal(scope), self.config, offer_tools=False)
        # A conversation keeps the fragment of its first request: what memory held then, so its prompt prefix
        # does not move when the model writes (it finds new facts with the tools). A new conversation gets
        # the listing as it is now.
        key = (scope.parts, opening(req))
        later = sum(m.role != "system" for m in req.messages) > 1
        session = MemorySession(scope, self.journal(scope), self.config, self.fragments.get(key) if later else None)
        self.fragments[key] = session.fragment
        self.fragments.move_to_end(key)
        while len(self.fragments) > FRAGMENTS_KEPT:
            self.fragments.popitem(last=False)
        return session

    def close(self) -> None:
        for j in self.journals.values():
            j.close()
        self.journals.clear()

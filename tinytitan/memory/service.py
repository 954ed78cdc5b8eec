"""Memory for a server: its settings, its database (shared with stored responses unless told otherwise), the
workspaces' memory, and per-request sessions.

Rules:
- Memory lives in the state database (tinytitan/store/db.py): ``state`` names it (a directory's ``state.db``,
  a PostgreSQL URL, ``memory``); None: ``directory``'s ``state.db``. Older journals under ``directory`` are
  migrated into it at start (migrate.py). A database that cannot be opened leaves memory in this process only:
  the fragment and every write's answer say so.
- A workspace's memory is rows under its scope (workspace.py): a request that names a new workspace creates
  nothing until memory is written there, and at most ``max_workspaces`` workspaces get memory (a new one's
  write past that is refused, saying why).
- A forced call (``tool_choice`` required, Anthropic's ``any``, a tool by name, ``allowed_tools``) is the
  client's: that request is offered no memory tools, so no memory call can stand in for the call it forces;
  its fragment says memory is shown, not reachable, and is not kept for the conversation.
- A session is one request's view: its scope, its workspace, the tools offered and the bootstrap fragment.
  Making one reads the database: the server makes it in a worker thread.
- What memory puts in the prompt (the fragment, the tools' results) is written through ``shield`` (markup.py):
  memory text never becomes one of the model's tokens.
- A conversation (known by its system prompt and first turn) keeps the fragment of its first request for its
  later ones, so a write does not move its prompt prefix (and defeat the prompt cache); a new conversation
  gets the listing as it is now. The fragment is kept in this process (the newest ``FRAGMENTS_KEPT``) and in
  the database (the newest ``FRAGMENTS_STORED``, ``memory_fragments``): after a restart (the prompt cache on
  disk outlives it) and on another server of the same database, the conversation is shown the same fragment.
  Keeping it is best effort: a database that cannot store it leaves the process's copy, and the request runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..chat_request import ChatRequest, Tool
from ..store import db as dbm
from . import fragment, tools
from .markup import Shield
from .migrate import migrate_journals
from .scope import NAMESPACE, Scope, default_dir, derive, os_user
from .workspace import Workspace

log = logging.getLogger("tinytitan.memory")


@dataclass
class MemoryConfig:
    directory: Path = field(default_factory=default_dir)  # older journals (migrated); the database when no state
    state: str | None = None  # the database: a directory, a .db file, a postgresql:// URL, "memory"
    tools: str = "full"  # off | minimal | full
    rounds: int = 4  # memory tool rounds per request
    namespace: str = NAMESPACE
    user: str | None = None  # None: the OS user
    launch_dir: str = field(default_factory=os.getcwd)
    max_records: int = fragment.MAX_RECORDS
    max_bytes: int = fragment.MAX_BYTES
    consolidate: float = 30.0  # seconds a workspace is quiet before its conversation is consolidated; 0: never
    home: str | None = None  # None: the user's home (refused as a workspace, with its parent)
    max_workspaces: int = 1000  # workspaces with memory; a new one's first write past this is refused


def scope_key(scope: Scope) -> str:
    return "/".join(scope.parts)


FRAGMENTS_KEPT = 256  # conversations whose bootstrap fragment is remembered in this process
FRAGMENTS_STORED = 4096  # ... and in the database (the newest first kept)


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
    def __init__(self, scope: Scope, workspace: Workspace, config: MemoryConfig, fragment_text: str | None = None,
                 offer_tools: bool = True):
        self.scope = scope
        self.workspace = workspace
        self.tools: tuple[Tool, ...] = tools.definitions(config.tools) if offer_tools else ()
        self.names = frozenset(t.name for t in self.tools)
        self.rounds = config.rounds
        self.shield = Shield()  # (the layer's: markup.py, for the request's model)
        self.fragment = fragment_text or fragment.bootstrap(workspace, os.path.basename(scope.path) or scope.path,
                                                            tuple(t.name for t in self.tools), config.max_records,
                                                            config.max_bytes)

    def augment(self, req: ChatRequest) -> ChatRequest:
        """The fragment at the end of the system prompt, the memory tools after the client's. A client tool of
        the same name keeps its name: the server never runs a call it cannot tell from the client's."""
        client = {t.name for t in req.tools}
        own = tuple(t for t in self.tools if t.name not in client)
        self.names = frozenset(t.name for t in own)
        # (closing the system prompt the model reads: the request's own, else the model's default)
        note = "\n\n".join(t for t in (req.system_note, self.shield(self.fragment)) if t)
        return req.with_(system_note=note, tools=req.tools + own)

    def run(self, name: str, arguments: str) -> tuple[str, bool]:
        # (what it shows the model is shielded; what the model writes back is stored as the text it was)
        text, ok = tools.execute(self.workspace, name, self.shield.restore(arguments))
        return self.shield(text), ok


class Memory:
    def __init__(self, config: MemoryConfig, database: dbm.Database | None = None):
        self.config = config
        self.user = config.user or os_user()
        self.fragments: OrderedDict[tuple, str] = OrderedDict()
        self._lock = threading.Lock()  # sessions are made in worker threads
        self.why_not: str | None = None
        self.owned = database is None
        if database is None:
            where = config.state if config.state is not None else Path(config.directory)
            try:
                database = dbm.open_database(where)
            except Exception as exc:  # memory never fails the server: it runs in this process only, and says so
                self.why_not = f"the memory database cannot be opened ({exc})"
                log.error("memory: %s; memory is kept in this process only", self.why_not)
                database = dbm.SqliteDatabase(None)
        self.db = database
        if self.db.persistent:
            try:
                migrate_journals(self.db, Path(config.directory))
            except Exception:
                log.exception("memory: the older journals under %s could not be migrated (they are left in place)",
                              config.directory)

    def workspace(self, scope: Scope) -> Workspace:
        return Workspace(self.db, scope_key(scope), scope.path, self.config.max_workspaces, self.why_not)

    @contextmanager
    def hold(self, scope: Scope) -> Iterator[Workspace]:
        """The scope's workspace for the length of a block (a request, a consolidation pass)."""
        yield self.workspace(scope)

    def session(self, req: ChatRequest) -> MemorySession | None:
        if not req.memory or req.fast or req.prompt is not None:  # a raw prompt has no system turn, no tools
            return None
        scope = derive(req, self.config.launch_dir, self.config.namespace, self.user, self.config.home)
        if scope is None:
            return None
        if forced(req) or req.tool_choice == "none":  # (with "none" no tool is declared to the model at all)
            return MemorySession(scope, self.workspace(scope), self.config, offer_tools=False)
        # A conversation keeps the fragment of its first request: what memory held then, so its prompt prefix
        # does not move when the model writes (it finds new facts with the tools). A new conversation gets
        # the listing as it is now.
        key = (scope.parts, opening(req))
        later = sum(m.role != "system" for m in req.messages) > 1
        with self._lock:
            kept = self.fragments.get(key) if later else None
        if later and kept is None:
            kept = self._stored_fragment(key)
        session = MemorySession(scope, self.workspace(scope), self.config, kept)
        if kept is None:
            self._store_fragment(key, session.fragment)
        with self._lock:
            self.fragments[key] = session.fragment
            self.fragments.move_to_end(key)
            while len(self.fragments) > FRAGMENTS_KEPT:
                self.fragments.popitem(last=False)
        return session

    def _stored_fragment(self, key: tuple) -> str | None:
        try:
            row = self.db.run(lambda tx: tx.row("SELECT fragment FROM memory_fragments WHERE scope = ? AND "
                                                "opening = ?", ("/".join(key[0]), key[1])), write=False)
        except dbm.storage_errors() as exc:  # memory never fails a request: the listing as it is now
            log.warning("memory: a conversation's fragment could not be read (%s)", type(exc).__name__)
            return None
        return row[0] if row else None

    @staticmethod
    def drop_fragments(tx, scope: str) -> None:
        """Forget the listings kept for a workspace's conversations (in ``tx``): a conversation shown a key that
        was then deleted or forgotten reads memory anew, after a restart too."""
        tx.exec("DELETE FROM memory_fragments WHERE scope = ?", (scope,))

    def _store_fragment(self, key: tuple, text: str) -> None:
        def store(tx) -> None:
            tx.exec("INSERT INTO memory_fragments (scope, opening, fragment, at) VALUES (?, ?, ?, ?) ON CONFLICT "
                    "(scope, opening) DO UPDATE SET fragment = excluded.fragment, at = excluded.at",
                    ("/".join(key[0]), key[1], text, time.time()))
            over = tx.row("SELECT count(*) FROM memory_fragments")[0] - FRAGMENTS_STORED
            if over > 0:
                tx.exec("DELETE FROM memory_fragments WHERE (scope, opening) IN (SELECT scope, opening FROM "
                        "memory_fragments ORDER BY at LIMIT ?)", (over,))

        try:
            self.db.run(store)
        except dbm.storage_errors() as exc:  # (a full disk): this process keeps it still
            log.warning("memory: a conversation's fragment could not be stored (%s)", type(exc).__name__)

    def close(self) -> None:
        if self.owned:
            self.db.close()

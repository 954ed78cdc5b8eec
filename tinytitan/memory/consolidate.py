"""Consolidation: when a workspace's conversation goes quiet, the model is asked which of its facts must not be
contradicted later, and they are written to memory under addressed keys.

Rules:
- Each request with memory whose answer finished marks its workspace active and keeps its conversation (the
  messages as the client sent them, plus the answer) as that workspace's latest transcript: rendered at once,
  newest part kept, at most
  ``TRANSCRIPT_CHARS`` characters, so a long conversation is never held whole. Transcripts are rows of
  ``memory_transcripts`` (one per workspace, in the state database): at most ``MAX_ACTIVE`` rows; past that
  the one active longest ago is dropped (and logged). Rows left by an earlier run (a restart, another server
  on the same database) are consolidated once quiet.
- A pass takes its transcript's row (so two servers never both consolidate it; a pass cut short, by a client
  or by the server stopping its generation, puts it back unless a newer one was written) and writes through
  the workspace's memory as it is then.
- A workspace quiet for ``quiet`` seconds is consolidated once (until it is active again), and only while the
  server is idle: no request decoding or waiting. A request that arrives meanwhile cancels the pass (clients
  come first); the workspace is tried again once quiet.
- The pass is one tool-free request (temperature 0, memory off for it): an instruction, the existing keys with
  their summaries (a fact that updates one reuses its key), and the newest part of the transcript, the text of
  the model's added tokens in them broken (markup.py: never the tokens themselves). The answer is
  read as ``key: fact`` lines (at most ``MAX_FACTS``); a line whose key does not parse is skipped. Each fact is a
  ``memory_set`` tagged ``consolidated``: a key it reuses keeps its creation time and importance.
- It never fails anything: an error is logged (sizes, never contents) and the workspace waits for new activity.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

import trio

from ..chat_request import ChatRequest, Message
from ..errors import ApiError
from ..events import SHUTTING_DOWN, Failed, TextDelta
from .keys import Refused
from .markup import Shield, added_texts
from .records import WriteFailed
from .scope import Scope
from .service import Memory, MemorySession, scope_key
from .workspace import Workspace

log = logging.getLogger("tinytitan.memory")

QUIET = 30.0
MAX_FACTS = 20
TRANSCRIPT_CHARS = 16000
KNOWN_KEYS = 60
MAX_ACTIVE = 256
MAX_TOKENS = 768

INSTRUCTION = """You keep a coding agent's long-term memory for one workspace. From the conversation below,
write down the facts that must not be contradicted later: decisions and their reasons, approaches that were
tried and failed, how to build and test, constraints the user stated. Leave out anything temporary, anything
the code or its history already says, and secrets. When a fact updates one of the existing keys, reuse that
key. Answer with one fact per line, as `key: fact`, with a path-like key (for example `build/command`).
Answer NONE when nothing is worth keeping."""

_FACT = re.compile(r"^\s*(?:[-*]\s*)?`?([^\s:`]+)`?\s*:\s*(\S.*?)\s*$")


@dataclass
class Activity:
    scope: Scope
    last: float = field(default_factory=trio.current_time)


def keep_transcript(tx, scope: str, path: str, model: str, transcript: str, cap: int) -> list[str]:
    """The workspace's latest transcript stored; the scopes dropped to stay within ``cap`` rows."""
    tx.exec("INSERT INTO memory_transcripts (scope, path, model, transcript, at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (scope) DO UPDATE SET path = excluded.path, model = excluded.model, "
            "transcript = excluded.transcript, at = excluded.at", (scope, path, model, transcript, time.time()))
    over = tx.row("SELECT count(*) FROM memory_transcripts")[0] - cap
    if over <= 0:
        return []
    dropped = [r[0] for r in tx.rows("SELECT scope FROM memory_transcripts ORDER BY at LIMIT ?", (over,))]
    tx.exec(f"DELETE FROM memory_transcripts WHERE scope IN ({', '.join('?' * len(dropped))})", dropped)
    return dropped


def take_transcript(tx, scope: str) -> tuple[str, str] | None:
    """(model, transcript), the row deleted: this pass owns it."""
    return tx.row("DELETE FROM memory_transcripts WHERE scope = ? RETURNING model, transcript", (scope,))


def put_back(tx, scope: str, path: str, model: str, transcript: str) -> None:
    tx.exec("INSERT INTO memory_transcripts (scope, path, model, transcript, at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (scope) DO NOTHING", (scope, path, model, transcript, time.time()))


def render(messages: tuple[Message, ...], limit: int = TRANSCRIPT_CHARS) -> str:
    """The conversation as text, system prompts left out, newest part kept when it is too long (read from the
    end, so only what is kept is ever rendered)."""
    lines: list[str] = []
    size = 0
    for m in reversed(messages):
        if m.role == "system":
            continue
        if m.role == "tool":
            turn = [f"[tool result {m.name or ''}] {m.content[:500]}"]
        else:
            turn = ([f"[{m.role}] {m.content[-(limit + 1):]}"] if m.content else []) + [
                f"[{m.role} calls {call.name}] {call.arguments[:500]}" for call in m.tool_calls]
        for line in reversed(turn):
            lines.append(line)
            size += len(line) + 1
        if size > limit:
            break
    text = "\n".join(reversed(lines))
    return text if len(text) <= limit else "…" + text[-limit:]


def read_facts(text: str) -> list[tuple[str, str]]:
    facts = []
    for line in text.splitlines():
        found = _FACT.match(line)
        if found and found.group(1).upper() != "NONE":
            facts.append((found.group(1), found.group(2)))
    return facts[:MAX_FACTS]


class Consolidator:
    def __init__(self, engine, memory: Memory, quiet: float = QUIET, poll: float = 1.0):
        """``engine``: the undecorated engine (its sessions, its queue counts); ``memory``: the workspaces."""
        self.engine = engine
        self.memory = memory
        self.quiet = quiet
        self.poll = poll
        self.active: dict[tuple[str, str, str], Activity] = {}
        self.passes = 0  # consolidation passes that wrote (for tests and the log)

    async def seen(self, session: MemorySession, req: ChatRequest, answer: str) -> None:
        transcript = render(req.messages + ((Message("assistant", answer),) if answer else ()))
        parts = session.scope.parts
        self.active.pop(parts, None)
        self.active[parts] = Activity(session.scope)
        try:
            dropped = await self.memory.db.call(keep_transcript, scope_key(session.scope), session.scope.path,
                                                req.model, transcript, MAX_ACTIVE)
        except Exception as exc:  # memory never fails anything
            log.warning("memory consolidation: the transcript could not be kept (%s)", type(exc).__name__)
            dropped = []
        for scope in dropped:
            self.active.pop(tuple(scope.split("/")), None)
        while len(self.active) > MAX_ACTIVE:
            del self.active[next(iter(self.active))]
        for scope in dropped:
            log.info("memory consolidation: %s dropped (more than %d workspaces waiting)", scope, MAX_ACTIVE)

    @property
    def idle(self) -> bool:
        return self.engine.running == 0 and self.engine.waiting == 0

    async def load(self) -> None:
        """The transcripts an earlier run (or another server) left for this server's user: waiting again."""
        prefix = f"{self.memory.config.namespace}/{self.memory.user}/"
        try:
            rows = await self.memory.db.call(lambda tx: tx.rows(
                "SELECT scope, path FROM memory_transcripts WHERE substr(scope, 1, ?) = ? ORDER BY at",
                (len(prefix), prefix)), write=False)
        except Exception as exc:
            log.warning("memory consolidation: waiting transcripts could not be read (%s)", type(exc).__name__)
            return
        for scope, path in rows:
            parts = tuple(scope.split("/"))
            if len(parts) == 3 and parts not in self.active:
                self.active[parts] = Activity(Scope(*parts, path))
        if rows:
            log.info("memory consolidation: %d workspaces from an earlier run wait to be consolidated", len(rows))

    async def run(self) -> None:
        """Forever: consolidate each workspace that has gone quiet, while the server is idle."""
        await self.load()
        while True:
            await trio.sleep(self.poll)
            now = trio.current_time()
            for parts, act in list(self.active.items()):
                if now - act.last < self.quiet or not self.idle:
                    continue
                if self.active.get(parts) is act:
                    del self.active[parts]
                if not await self._pass_unless_busy(act) and parts not in self.active:
                    act.last = trio.current_time()
                    self.active[parts] = act  # cut short by a client: again, once quiet

    async def _pass_unless_busy(self, act: Activity) -> bool:
        """The pass, cancelled as soon as a client request waits; False when it was."""
        async with trio.open_nursery() as nursery:
            done = []

            async def watch():
                # another request came: this pass's own place counts once, waiting or running (in a batch a
                # client's request would decode beside it rather than wait)
                while self.engine.running + self.engine.waiting <= 1:
                    await trio.sleep(0.05)
                log.info("memory consolidation: a request arrived; the pass is put off")
                nursery.cancel_scope.cancel()

            async def work():
                await self.consolidate(act)
                done.append(True)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            nursery.start_soon(work)
        return bool(done)

    async def consolidate(self, act: Activity) -> int:
        key = scope_key(act.scope)
        taken = await self.memory.db.call(take_transcript, key)
        if taken is None:  # another server took it, or it was dropped
            return 0
        model, transcript = taken
        if not transcript.strip():
            return 0
        try:
            with self.memory.hold(act.scope) as workspace:
                return await self._consolidate(act, workspace, model, transcript)
        except (trio.Cancelled, _Stopped) as exc:
            with trio.CancelScope(shield=True):  # cut short: the transcript waits again (unless a newer one does)
                await self.memory.db.call(put_back, key, act.scope.path, model, transcript)
            if isinstance(exc, _Stopped):  # (the next start consolidates it)
                return 0
            raise

    async def _consolidate(self, act: Activity, workspace: Workspace, model: str, transcript: str) -> int:
        ranked = await trio.to_thread.run_sync(workspace.ranked, KNOWN_KEYS, True)
        known = "\n".join(f"- {r.key}: {r.summary}" for r in ranked) or "(none)"
        backend = getattr(self.engine, "backends", {}).get(model)
        guard = Shield(added_texts(getattr(backend, "tokenizer", None)))  # memory text stays text (markup.py)
        req = ChatRequest(model=model, messages=(
            Message("system", INSTRUCTION),
            Message("user", guard(f"Existing memory keys:\n{known}\n\nConversation:\n{transcript}"))),
            tool_choice="none", temperature=0.0, max_tokens=MAX_TOKENS, reasoning="none", memory=False)
        text = []
        try:
            async with self.engine.session(req, streamed=False) as events:
                async for ev in events:
                    if isinstance(ev, TextDelta):
                        text.append(ev.text)
                    elif isinstance(ev, Failed) and ev.code == SHUTTING_DOWN:
                        raise _Stopped
                    elif isinstance(ev, Failed):
                        log.warning("memory consolidation failed: %s", ev.type)
                        return 0
        except _Stopped:
            raise
        except ApiError as exc:
            if exc.code == SHUTTING_DOWN:  # the server stopped before the pass began: cut short, not failed
                raise _Stopped from None
            log.warning("memory consolidation could not run: %s", exc.code or exc.kind)
            return 0
        except Exception as exc:  # memory never fails anything
            log.warning("memory consolidation could not run: %s", type(exc).__name__)
            return 0
        facts = [(key, guard.restore(value)) for key, value in read_facts("".join(text))]  # (values, not shown text)
        written = await trio.to_thread.run_sync(write_facts, workspace, facts)
        self.passes += 1
        log.info("memory consolidation of %s: %d facts written from a %d-character transcript", act.scope,
                 written, len(transcript))
        return written


class _Stopped(Exception):
    """The server stopped the pass's generation (its wind-down): the pass is cut short, as when cancelled."""


def write_facts(workspace: Workspace, facts: list[tuple[str, str]]) -> int:
    """Each fact a set tagged ``consolidated`` (a key it reuses keeps its creation time and importance)."""
    written = 0
    for key, value in facts:
        try:
            old = workspace.get(key)
            tags = sorted(set(old.tags if old else ()) | {"consolidated"})
            workspace.set(key, value, tags=tags)
            written += 1
        except Refused:
            log.info("memory consolidation: a fact with an unusable key (%d chars) skipped", len(key))
        except WriteFailed as exc:
            log.error("memory consolidation: not saved (%s)", exc.strerror or exc)
            break
    return written

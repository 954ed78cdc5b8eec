"""Summarising a conversation with the served model: the engine service behind compaction.

Rules:
- The transcript is summarised by the named model under a handover instruction — requirements, decisions
  with reasons and rejected options, facts, next step; paths and identifiers quoted exactly — with thinking
  off and temperature 0, through the engine's normal queue (a session per pass).
- The summary is measured with the model's own tokenizer (off the event loop) against the budget: the one
  asked for, else 1/8 of the context window, at most 4096. Over budget, a second pass compresses it (never
  a cut).
- Guards: lines copied from the instruction are dropped; a repetition loop (a stretch of text repeated
  over and over) makes a pass failed; a failed pass, or a second pass still over budget, falls back to
  the newest transcript text trimmed to the budget.
- ``mode`` says which: ``model`` (first pass), ``compressed`` (second pass), ``extractive`` (fallback).
- A transcript is text, or text and images in order (``ImagePart``). Its images pass the checks a request's
  images pass (count, format, size: ``check``, an ImageError naming the part) whatever the model; a model that
  reads images reads them in the first pass, where they stand, one that does not reads ``[image]`` there.
  A transcript too long for the window keeps its newest text and no image. The second pass and the fallback are
  text.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, AsyncContextManager, Protocol, Sequence

import trio

from .. import images
from ..chat_request import ChatRequest, ImagePart, Message
from ..errors import ApiError
from ..events import SHUTTING_DOWN, Failed, Finished, TextDelta, Usage
from .prompt.tokenizer_facts import ids_of

log = logging.getLogger("tinytitan.summarise")

Transcript = str | Sequence[str | ImagePart]  # text, or text and images in order

MAX_BUDGET = 4096

INSTRUCTION = """You are writing a handover note so that another engineer can continue this work without \
seeing the conversation. Summarise the transcript the user sends. Write these sections:
Requirements: what the user asked for, including constraints and preferences.
Decisions: each decision made, with its reason and the options that were rejected.
Facts: what was learned (file contents, command results, errors, versions).
Next step: the exact next action to take.
Quote file paths, commands, identifiers and error messages exactly as they appear. Be brief. \
Write only the note."""

COMPRESS = """Shorten this handover note to at most {budget} tokens. Keep every requirement, decision, \
reason, file path, identifier and the next step; drop repetition and detail that does not change what \
to do next. Write only the shortened note."""


@dataclass
class Summary:
    text: str
    mode: str
    usage: Usage


# -- guards -----------------------------------------------------------------------------------------------
# a stretch of 12+ characters said 5 times in a row, or a short one (3+) said 16 times: a model stuck in a
# loop — not a markdown table row (``| --- `` five times) or a list of short items
_LOOP = re.compile(r"(.{12,}?)\1{4,}|(.{3,}?)\2{15,}", re.S)


def drop_copied_lines(text: str, *instructions: str) -> str:
    copied = {ln.strip() for ins in instructions for ln in ins.splitlines() if ln.strip()}
    return "\n".join(ln for ln in text.splitlines() if ln.strip() not in copied).strip()


def looping(text: str) -> bool:
    """A model stuck in a loop: a long stretch said again and again (``_LOOP``), or one line (of more than 6
    characters: not a bare ``- None``) said 4 times or more."""
    if _LOOP.search(text):
        return True
    lines = [ln.strip() for ln in text.splitlines() if len(ln.strip()) > 6]
    return any(lines.count(ln) >= 4 for ln in set(lines))


class Sessions(Protocol):
    """What a summary needs of the engine (which makes Summarisers: engine.py), named here so this module
    does not import the engine."""

    def resolve(self, name: str | None) -> tuple[str, bool]: ...
    def backend_for(self, model_id: str) -> Any: ...
    def apply_model(self, req: ChatRequest) -> ChatRequest: ...
    def session(self, req: ChatRequest, *, streamed: bool = True) -> AsyncContextManager[Any]: ...
    async def count_tokens(self, req: ChatRequest) -> int: ...


class Summariser:
    """One summary: its model, budget and the usage of its passes."""

    def __init__(self, engine: Sessions, model: str, budget: int | None):
        self.engine = engine
        self.model = engine.resolve(model)[0]  # the served id: '<id>-fast' would strip the instruction
        self.backend = engine.backend_for(self.model)  # the named model's tokenizer
        window = getattr(self.backend, "context_window", 32768)
        self.budget = budget or min(window // 8, MAX_BUDGET)
        self.usage = Usage()
        self._passes: list[Any] = []  # the sessions of its passes, the one decoding last
        self._running: Any = None  # the pass's session not finished yet (nor failed)

    def count(self, text: str) -> int:
        tok = getattr(self.backend, "tokenizer", None)
        if tok is None:
            return max(1, len(text) // 4)
        return len(ids_of(tok)(text))

    def request(self, system: str, user: str, max_tokens: int, parts: tuple = ()) -> ChatRequest:
        """``parts``: the user turn's text and images in order, where it holds images."""
        if parts:  # (a message's content is its text parts: the images stand in ``parts`` alone)
            user = "".join(p for p in parts if isinstance(p, str))
        req = ChatRequest(model=self.model, messages=(Message("system", system), Message("user", user, parts=parts)),
                          tool_choice="none", temperature=0.0, max_tokens=max_tokens, reasoning="none",
                          memory=False)
        return self.engine.apply_model(req).with_(reasoning="none")

    def check(self, transcript: Transcript) -> None:
        """The transcript's images checked as a request's are (count, format, size), whatever the model: an
        ImageError names the first that is refused."""
        if not isinstance(transcript, str) and any(isinstance(p, ImagePart) for p in transcript):
            images.check_request(ChatRequest(model=self.model, messages=(Message("user", "", parts=tuple(transcript)),)))

    def read(self, transcript: Transcript) -> tuple[str, tuple]:
        """(the transcript's text, an image standing as ``[image]`` in it; the parts the first pass's user turn
        carries: the text and the images, for a model that reads images, else ())."""
        if isinstance(transcript, str):
            return transcript, ()
        text = images.transcript_text(transcript)
        seen = getattr(self.backend, "takes_images", False) and any(isinstance(p, ImagePart) for p in transcript)
        return text, tuple(transcript) if seen else ()

    async def fitted(self, transcript: Transcript) -> tuple[str, tuple]:
        """``read``, fitted to the window: a transcript cut to its newest text keeps no image."""
        text, parts = self.read(transcript)
        fitted = await trio.to_thread.run_sync(self.fit, text)
        return fitted, parts if fitted == text else ()

    async def prompt_tokens(self, transcript: Transcript) -> int:
        self.check(transcript)
        text, parts = await self.fitted(transcript)
        return await self.engine.count_tokens(self.request(INSTRUCTION, text, self.budget, parts))

    @property
    def decoded(self) -> tuple[int, int]:
        """(completion, reasoning) tokens its passes decoded so far, the one decoding too (``Session.decoded``): what
        a request whose client hung up mid-summary is counted for."""
        counts = [getattr(p, "decoded", (0, 0)) for p in self._passes]
        return sum(done for done, _ in counts), sum(thought for _, thought in counts)

    @property
    def spent(self) -> Usage:
        """Its usage as a finished summary counts it (``usage``: the passes that finished), the pass still decoding
        included: its prompt and what it decoded so far (a turn cut mid-summary is counted for that)."""
        if self._running is None:
            return self.usage
        done, thought = self._running.decoded
        return self.usage + Usage(self._running.prompt_tokens, 0, done, thought)

    async def run_pass(self, system: str, user: str, max_tokens: int, parts: tuple = ()) -> str | None:
        """One pass through the queue; None when it failed (an error, a loop, nothing left)."""
        text: list[str] = []
        async with self.engine.session(self.request(system, user, max_tokens, parts), streamed=False) as events:
            self._passes.append(events)
            self._running = events  # (until it ends: a pass cut short, the request gone, still counts)
            async for ev in events:
                if isinstance(ev, TextDelta):
                    text.append(ev.text)
                elif isinstance(ev, Finished):
                    self.usage += ev.usage
                    self._running = None
                elif isinstance(ev, Failed) and ev.code == SHUTTING_DOWN:  # not a failed pass to fall back from:
                    raise ApiError(ev.type, ev.message, code=ev.code)  # the request ends, as its generation would
                elif isinstance(ev, Failed):  # (not counted, as in a summary that finished after it)
                    log.warning("compaction pass failed: %s", ev.message)
                    self._running = None
                    return None
        out = "".join(text).strip()
        if looping(out):
            log.warning("compaction pass ran into a repetition loop; it counts as failed")
            return None
        out = drop_copied_lines(out, INSTRUCTION, COMPRESS.format(budget=self.budget))
        return out or None

    def extractive(self, text: str) -> str:
        """The newest text of the transcript, trimmed to the budget."""
        tok = getattr(self.backend, "tokenizer", None)
        if tok is None:
            return text[-self.budget * 4:]
        ids = ids_of(tok)(text)
        keep = self.budget
        while True:
            out = tok.decode(ids[-keep:]) if keep < len(ids) else text
            if self.count(out) <= self.budget or keep <= 1:
                return out.strip()
            keep -= max(1, keep // 20)

    def fit(self, text: str) -> str:
        """A transcript longer than the context window allows keeps its newest part (logged)."""
        window = getattr(self.backend, "context_window", 32768)  # the named model's window
        room = window - self.budget - 512 - self.count(INSTRUCTION)
        if room <= 0 or self.count(text) <= room:
            return text
        log.warning("compaction transcript is longer than the context window allows: its oldest part is left out")
        saved, self.budget = self.budget, room
        try:
            return self.extractive(text)
        finally:
            self.budget = saved

    async def summarise(self, transcript: Transcript) -> Summary:
        self.check(transcript)
        text, parts = await self.fitted(transcript)
        first = await self.run_pass(INSTRUCTION, text, 4 * self.budget, parts)
        if first is not None and await self._fits(first):
            return Summary(first, "model", self.usage)
        if first is not None:
            second = await self.run_pass(COMPRESS.format(budget=self.budget), first, 2 * self.budget)
            if second is not None and await self._fits(second):
                return Summary(second, "compressed", self.usage)
        return Summary(await trio.to_thread.run_sync(self.extractive, text), "extractive", self.usage)

    async def _fits(self, text: str) -> bool:
        return await trio.to_thread.run_sync(self.count, text) <= self.budget

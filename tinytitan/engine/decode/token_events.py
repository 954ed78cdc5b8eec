"""From generated tokens to TokenEvents: the part every backend shares.

A backend calls ``start()`` once the prompt is known, ``token(text)`` for each generated token's text
(returns False when a client stop string, or the turn's last allowed tool call, ended the answer), and
``end(hit_length)`` when decoding stopped, or ``fail(exc)`` when it failed once started. Channel parsing, stop strings,
usage and the finish reason are decided here, once; either ending is sent once (``finished``).

Where the request asks for log probabilities, ``token`` also gets each token's (``TokenLogprob``): those of the
answer's text tokens (not reasoning, not tool-call markup: OpenAI lists only content tokens) ride on the
``TextDelta`` that sends their text; a token whose text is held back (a character begun, a possible stop string
or marker) goes with the delta that releases it. Tokens whose text never goes out (a stop string, a marker that
opened a call, the layout the parser drops before a text run, a channel header's markup) are dropped with it, so
the deltas' figures are the sent text's tokens, in order (``Owed`` matches the tokens to the text the parser gives
out: a client reading the first content token's probability reads the answer's first token, not the blank line
after a thought). The tokens of a character the end cut (the output cap struck inside it: its text is left out)
are generated and counted: they go last, on a delta of no text, as OpenAI and vLLM list every generated token.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

from ...events import (Failed, Finished, Started, TextDelta, Timing, TokenEvent, TokenLogprob, ToolCallDone,
                       ToolCallStarted, Usage)
from .output_parser import REASONING, TEXT, OutputParser

Emit = Callable[[TokenEvent], None]


class Owed:
    """The answer's text tokens' figures not sent yet, each with the text it gave the parser (``fed``): matched to
    the text the parser gives out, so the tokens that text spells are sent with it (``take``), those whose text the
    parser dropped before it are not, and those whose text it still holds wait."""

    def __init__(self):
        self.fed = ""  # the waiting tokens' text, as fed to the parser
        self.waiting: list[tuple[TokenLogprob, int, int]] = []  # (figures, start, end) in ``fed``
        self.ready: list[tuple[TokenLogprob, int]] = []  # tokens whose text the parser gave out: the next delta's,
        # each with where its text begins in all the text given out (``given``)
        self.given = 0  # how much text the parser has given out
        self.flowing = False  # text went out and the parser has stayed in its text since: it drops nothing now

    def add(self, logprob: TokenLogprob, text: str) -> None:
        start = len(self.fed)
        self.fed += text
        self.waiting.append((logprob, start, len(self.fed)))

    def given_out(self, text: str) -> None:
        """The parser gave ``text`` out (a TextDelta's): the tokens that spell it are ready, those wholly before it
        spelled what the parser dropped. Text found nowhere in what they fed (the parser's own) readies them all."""
        at = -1
        if self.waiting and text:  # (in a run of text the parser gives out what it was fed in order: a repeated
            # "<" it held is the first, not the last; before the run, markup or layout it dropped may lead)
            at = 0 if self.flowing and self.fed.startswith(text) else self.fed.rfind(text)
        self.flowing = self.flowing or bool(text)
        base, self.given = self.given, self.given + len(text)
        if at < 0:
            self.ready += [(lp, base) for lp, _, _ in self.waiting]
            self.fed, self.waiting = "", []
            return
        upto, cut, kept = at + len(text), 0, []
        for lp, start, end in self.waiting:
            if start < at and end <= at:  # (a token of no text waits for the character it begins: not dropped)
                continue
            if start < upto:
                self.ready.append((lp, base + max(start - at, 0)))
                cut = end
            else:
                kept.append((lp, start - cut, end - cut))
        self.fed, self.waiting = self.fed[cut:], kept

    def take(self, before: int | None = None) -> tuple[TokenLogprob, ...]:
        """The ready tokens' figures; with ``before`` (where a stop string began in the text given out), only
        those of tokens whose text begins before it: the stop string's own tokens are not the answer's."""
        ready, self.ready = tuple(lp for lp, at in self.ready if before is None or at < before), []
        return ready

    def cut(self) -> tuple[TokenLogprob, ...]:
        """At the end: the tokens still waiting for the character they begin, which the answer's end cut (the
        output cap, or the end of turn, struck inside it): generated and counted, with no text of their own."""
        tail = []
        for lp, start, end in reversed(self.waiting):
            if start != end or end != len(self.fed):
                break
            tail.append(lp)
        return tuple(reversed(tail))

    def clear(self) -> None:
        """The text not given out by now was markup (a call's opening): its tokens are not the answer's."""
        self.fed, self.waiting, self.flowing = "", [], False

    def paused(self) -> None:
        """The parser left its text (a thought, a call): what it gives out next may follow text it dropped."""
        self.flowing = False


class StopMatcher:
    """Holds back text that could be the start of a stop string; cuts the text at the first match."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = tuple(s for s in stops if s)
        self.hold = max((len(s) for s in self.stops), default=1) - 1
        self.buf = ""
        self.matched: str | None = None

    def push(self, text: str) -> str:
        if not self.stops:
            return text
        self.buf += text
        first = None
        for s in self.stops:
            i = self.buf.find(s)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, s)
        if first:
            out, self.matched, self.buf = self.buf[: first[0]], first[1], ""
            return out
        cut = max(len(self.buf) - self.hold, 0)
        out, self.buf = self.buf[:cut], self.buf[cut:]
        return out

    def flush(self) -> str:
        out, self.buf = self.buf, ""
        return out


class DecodeLoop:
    def __init__(self, parser: OutputParser, stops: tuple[str, ...], emit: Emit, sampling: dict | None = None,
                 before: Timing | None = None, flush: Callable[[], None] | None = None):
        """``sampling``: the values the decoder samples with, reported on ``Started``. ``before``: the timing of
        what happened before decoding (queue, load, template), completed here with prefill and decode and
        sent on ``Finished``. ``flush``: tells the receiver of ``emit`` that the generation ends (``ending``)."""
        self.parser = parser
        self.stop = StopMatcher(stops)
        self.emit = emit
        self._flush = flush
        self.sampling = dict(sampling or {})
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion_tokens = 0
        self.reasoning_tokens = 0
        self.calls_sent = 0  # tool calls sent whole (their ToolCallDone complete)
        self.started = False
        self.finished = False  # its ending (Finished, or Failed once started) went out
        self.before = before or Timing()
        self.grammar_mask = None  # a grammar mask: its own ``seconds`` are the turn's ``grammar_mask_s`` (a decoder
        # may use it beyond masking: rows.py)
        self.draft_tokens = 0  # speculative decoding: tokens drafted, and of those accepted (rows.py)
        self.draft_accepted_tokens = 0
        self.started_at: float | None = None  # perf_counter at start(), then at the first generated token
        self.owed: Owed | None = None  # text tokens' log probabilities whose text has not gone out yet: made at the
        # first token that brings figures (a request that asks for them has them on every token), so a request
        # that did not ask pays nothing for them per delta
        self.first_token_at: float | None = None
        self.end_token: TokenLogprob | None = None  # the end-of-turn token's figures, sent last where listed (rows.py)

    def start(self, prompt_tokens: int, cached_tokens: int = 0, since: float | None = None,
              prompt_text: str | None = None) -> None:
        """``since``: when reading the prompt began, where that was before this call (a vision model's images,
        read where the row's cache starts): the prefill's time counts from there. ``prompt_text``: a prompt of
        token ids, decoded (``Started.prompt_text``)."""
        self.prompt_tokens, self.cached_tokens = prompt_tokens, cached_tokens
        self.started = True
        self.started_at = time.perf_counter() if since is None else since
        self.emit(Started(prompt_tokens, cached_tokens, self.sampling, prompt_text))

    def prompt_read(self, ev: TokenEvent) -> None:
        """The prompt's own tokens' figures (``PromptLogprobs``, where asked), once it is read: before any delta."""
        self.emit(ev)

    def token(self, text: str, logprob: TokenLogprob | None = None) -> bool:
        """One generated token (``logprob``: its figures, where asked); False once a stop string has matched, or
        the turn's last allowed tool call is complete (call_limit.py): stop decoding."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.completion_tokens += 1
        events, channel = self.parser.feed(text)
        if channel == REASONING:
            self.reasoning_tokens += 1
        if logprob is not None and self.owed is None:
            self.owed = Owed()
        if self.owed is not None:
            if logprob is not None and channel == TEXT:
                self.owed.add(logprob, text)
            elif channel != TEXT:
                self.owed.paused()
        self._send(events)
        return self.stop.matched is None and not getattr(self.parser, "turn_over", False)

    def parser_text(self, text: str) -> None:
        """Text the detokenizer released late (after the last token): parsed, not counted."""
        events, _ = self.parser.feed(text)
        self._send(events)

    def ending(self) -> None:
        """The generation ends (its Finished follows once the decoder has let go of it): what was sent is due."""
        if self._flush is not None:
            self._flush()

    def end(self, hit_length: bool) -> None:
        if self.stop.matched is None:
            events = self.parser.finish(cut=hit_length)
            if hit_length:  # a call still open when the cap struck was cut short, whatever its format
                events = [dataclasses.replace(ev, complete=False) if isinstance(ev, ToolCallDone) else ev
                          for ev in events]
            self._send(events)
        rest = self.stop.flush()
        if rest and self.stop.matched is None:
            self.emit(self._text(rest))
        # the tokens of a character the end cut, then the end-of-turn token where listed (rows.py): the last
        # tokens generated, no text of their own
        last = self.owed.cut() if self.owed is not None and self.stop.matched is None else ()
        last += (self.end_token,) if self.end_token is not None else ()
        if last:
            self.emit(TextDelta("", last))
        # a stop string matched after whole calls ends a turn that called tools (Anthropic's tool runner reads
        # stop_sequence as a final answer whose calls are not to be run); before any call, it is the turn's end
        stopped = self.stop.matched if not self.calls_sent else None
        if stopped is not None:
            reason = "stop_sequence"
        elif self.stop.matched is not None:
            reason = "tool_calls"
        elif hit_length:
            reason = "length"
        elif self.parser.tool_calls:
            reason = "tool_calls"
        else:
            reason = "stop"
        usage = Usage(self.prompt_tokens, self.cached_tokens, self.completion_tokens, self.reasoning_tokens)
        self.finished = True
        self.emit(Finished(reason, usage, stopped, self.timing()))

    def fail(self, exc: BaseException) -> None:
        """It failed after it started: the text a stop string held back while it might still match (and did not)
        is the answer's, sent before the failure as at any other end; then Failed, once."""
        if self.finished:
            return
        if self.stop.matched is None:
            rest = self.stop.flush()
            if rest:
                self.emit(self._text(rest))
        self.finished = True
        self.emit(Failed.in_generation(exc))

    def timing(self) -> Timing:
        """What happened before decoding (``before``), then prefill and decode as this loop saw them."""
        now = time.perf_counter()
        start = self.started_at if self.started_at is not None else now
        first = self.first_token_at if self.first_token_at is not None else now
        masked = self.grammar_mask.seconds if self.grammar_mask is not None else None
        return dataclasses.replace(self.before, prefill_s=first - start,
                                   prefill_tokens=self.prompt_tokens - self.cached_tokens, decode_s=now - first,
                                   decode_tokens=max(self.completion_tokens - 1, 0),
                                   grammar_mask_s=masked, draft_tokens=self.draft_tokens,
                                   draft_accepted_tokens=self.draft_accepted_tokens)

    def _send(self, events: list[TokenEvent]) -> None:
        for ev in events:
            if self.stop.matched is not None:
                return
            if isinstance(ev, TextDelta):
                if self.owed is not None:
                    self.owed.given_out(ev.text)
                held = len(self.stop.buf)
                text = self.stop.push(ev.text)
                if text:  # (once a stop string matched, where it began in the text given out: ``Owed.take``)
                    stop_at = None
                    if self.stop.matched and self.owed is not None:
                        stop_at = self.owed.given - held - len(ev.text) + len(text)
                    self.emit(self._text(text, stop_at))
            else:
                if self.stop.buf and not isinstance(ev, TextDelta):
                    self.emit(self._text(self.stop.flush()))
                if isinstance(ev, ToolCallStarted) and self.owed is not None:  # text tokens not sent by now were
                    self.owed.clear()  # the call's markup
                if isinstance(ev, ToolCallDone) and ev.complete:
                    self.calls_sent += 1
                self.emit(ev)

    def _text(self, text: str, stop_at: int | None = None) -> TextDelta:
        """A delta of the answer's text, with the figures of the tokens it completes (see the module's rules)."""
        return TextDelta(text, self.owed.take(stop_at) if self.owed is not None else ())

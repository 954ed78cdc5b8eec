"""Continuous batching on the model thread: mlx-lm's BatchGenerator, one member per session.

Rules:
- One loop, a job on the model thread, runs while any member is in flight. Each turn it takes the members
  that arrived, drops those whose consumer left, then calls ``BatchGenerator.next()`` once: one batched
  decode step for every member already decoding, plus one chunk of prompt (``prefill_step`` tokens, less
  while others decode) for members whose prompts are still being read. A member joins when its prompt has
  been read and leaves when it finishes; a long prompt never stalls the others for more than a chunk.
- A member brings its own prompt-cache prefix (it starts from the longest cached prefix), sampler (seeded
  per member: a seed gives the tokens it gives alone), logits processors, end-of-turn tokens and output
  cap. Its tokens go through its own detokenizer and DecodeLoop (channel parser, stop strings, usage) into
  its session's mailbox; the loop treats every member alike.
- A finished or cancelled member leaves the batch at once; what its KV cache holds is stored in the prompt
  cache before its Finished is sent. A failure while handling one member (its template, its sampler, a
  logits processor) fails that member only; a failure of the batched forward pass fails the members in it.
- A member that arrives to an empty batch decodes alone, outside it, on a plain KV cache (solo.py), until
  another member of its model arrives: then it joins the batch where it stands, and the newcomer after it.
  One of another model would wait for the batch to drain anyway: for it, the lone member decodes on alone.
- Members of another model wait until the batch has drained; then the loop switches models.

The per-request hooks a member carries (its logits processors) are described in engine.py.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from ..events import Failed
from .backend import Prepared
from .raw import IncrementalText
from .solo import PREFILL_STEP, Handover, Start, Stepper, decode_alone  # PREFILL_STEP: per step while nothing else decodes

if TYPE_CHECKING:
    from .mlx_backend import MLXBackend
    from .model_thread import ModelThread
    from .session import Mailbox

log = logging.getLogger("tinytitan.batch")


PREFILL_STEP_SHARED = 256  # ... while other members decode: each of their tokens waits at most this long


class Member:
    """One session's generation inside the batch: model-thread state only."""

    def __init__(self, backend: "MLXBackend", prepared: Prepared, box: "Mailbox"):
        self.backend = backend
        self.prepared = prepared
        self.box = box
        self.uid: int | None = None
        self.error: Exception | None = None  # raised by one of its own hooks during a batched step
        self.generated: list[int] = []
        self.decoded = 0  # tokens given to the detokenizer (end-of-turn tokens are not)
        self.loop = box.open_loop(backend.parser(prepared), prepared)
        self.detok = backend.tokenizer.detokenizer
        self.detok.reset()
        # a raw prompt's text comes from the token ids, with the prompt's end as context (raw.py)
        self.raw = IncrementalText(backend.tokenizer, prepared.tokens) if prepared.req.prompt is not None else None

    def feed(self, token: int) -> bool | None:
        """One sampled token, as stream_generate would report it: None while the generation goes on, else
        whether the output cap ended it."""
        self.generated.append(token)
        if token in self.backend.tokenizer.eos_token_ids:  # the end-of-turn token: not content
            self.detok.finalize()
            if self.detok.last_segment and self.raw is None:
                self.loop.parser_text(self.detok.last_segment)
            return False
        self.detok.add_token(token)
        self.decoded += 1
        last = self.decoded >= self.prepared.max_tokens
        if last:
            self.detok.finalize()
        text = self.raw.add(token) if self.raw is not None else self.detok.last_segment
        if not self.loop.token(text):  # a client stop string
            return False
        return True if last else None

    def finish(self, hit_length: bool) -> None:
        if self.raw is not None and self.loop.stop.matched is None:
            self.loop.parser_text(self.raw.flush())
        self.loop.end(hit_length)

    def end(self, hit_length: bool, kv: list) -> None:
        """It ended (end-of-turn, a stop string, its cap): what its cache holds is kept, its Finished sent, and
        the model thread lets go of it."""
        self.store(kv)
        self.finish(hit_length)
        self.box.close()

    def leave(self, kv: list | None) -> None:
        """Its consumer left: what was read so far is kept (the client may send it again), and the model thread
        lets go of it."""
        try:
            if kv is not None:
                self.store(kv)
        finally:
            self.box.close()

    def store(self, kv: list) -> None:
        """Keep what its KV cache holds for the requests after it. A cache taken out of the batch is a lazy
        slice of the batch's: evaluated here, so the entry owns its memory and no pending work of this thread's
        stream travels with it."""
        import mlx.core as mx

        mx.eval([c.state for c in kv if not c.empty()])
        self.backend.prompt_cache.store(list(self.prepared.tokens) + self.generated, kv)


class Batcher:
    """The batch loop's trio-facing half: ``submit`` a member from any thread; the loop starts on the model
    thread when the first member arrives and ends when the last one leaves."""

    def __init__(self, model_thread: "ModelThread", make_resident: Callable[[Any], float | None], max_batch: int):
        self.model_thread = model_thread
        self.make_resident = make_resident
        self.max_batch = max_batch
        self._inbox: collections.deque[Member] = collections.deque()
        self._lock = threading.Lock()
        self._running = False
        self.size = 0  # members in the batch now (decoding, or their prompt being read): the batch size shown

    def submit(self, member: Member) -> None:
        with self._lock:
            self._inbox.append(member)
            start, self._running = not self._running, True
        if start:
            self.model_thread.start_soon(self._run, lambda _outcome: None)

    # -- the loop (model thread) -----------------------------------------------------------------------------
    def _run(self) -> None:
        members: dict[int, Member] = {}
        later: collections.deque[Member] = collections.deque()  # members of another model
        state = _Generator()
        try:
            while True:
                with self._lock:
                    arrived = list(self._inbox)
                    self._inbox.clear()
                    if not arrived and not members and not later:
                        self._running = False
                        self.size = 0
                        return
                later.extend(arrived)
                while later and (not members or later[0].backend is state.backend):
                    member = later.popleft()
                    if member.box.stop.is_set():
                        member.box.close()
                        continue
                    self._join(state, members, member, lambda: self._next_joins(state, later))
                self._drop_stopped(state, members)
                self.size = len(members)
                if members:
                    self._step(state, members)
        except BaseException as exc:  # the loop itself broke: no member may be left waiting
            log.exception("batch loop failed")
            for member in list(members.values()) + list(later):
                _fail(member, exc)
            with self._lock:
                for member in self._inbox:
                    _fail(member, exc)
                self._inbox.clear()
                self._running = False
                self.size = 0
        finally:
            state.close()

    def _next_joins(self, state: "_Generator", later: collections.deque[Member]) -> bool:
        """Whether the member next in line (those taken in first, then the inbox) would join the batch now: one
        of the model being batched. One of another model waits until the batch has drained, and all behind it."""
        with self._lock:
            nxt = later[0] if later else self._inbox[0] if self._inbox else None
        return nxt is not None and nxt.backend is state.backend

    def _join(self, state: "_Generator", members: dict[int, Member], member: Member,
              others_waiting: Callable[[], bool]) -> None:
        """Start ``member``: alone (no one in the batch, and no one next in line who would join it) it decodes
        outside the batch until one who would arrives (solo.py), then joins it where it stands; else it joins
        at once."""
        try:
            if state.backend is not member.backend:
                load_s = state.switch(member.backend, self.make_resident, self.max_batch)
                if load_s is not None:  # it loaded the model
                    member.loop.before = dataclasses.replace(member.loop.before, load_s=load_s)
            start = _begin(state, member)
            if not members and not others_waiting():
                self.size = 1
                handover = decode_alone(state, member, start, others_waiting)
                if handover is None:
                    return
                state.insert(member, start, handover)
                inserted = True
            else:
                inserted = self._insert(state, member, start)
        except Exception as exc:  # this member's own failure (its model would not load, its sampler ...)
            _fail(member, exc)
            return
        except BaseException as exc:  # the loop itself breaks (below): this member is in no list it fails
            _fail(member, exc)
            raise
        if inserted:
            members[member.uid] = member

    @staticmethod
    def _insert(state: "_Generator", member: Member, start: Start) -> bool:
        """Put ``member`` into the running batch; False when it ended before joining (its first token, read
        ahead, was its last)."""
        tokens, cached, kv, max_tokens = list(member.prepared.tokens), start.cached, start.kv, start.max_tokens
        if len(state.gen._generation_batch) > 0 and 0 < len(tokens) - cached <= PREFILL_STEP_SHARED:
            first = _first_token(state, kv, tokens, cached, start.sampler, start.processors)
            if member.error is not None:
                raise member.error
            ended = member.feed(first)
            if ended is not None:  # end-of-turn, a stop string or a one-token cap
                member.end(ended, kv)
                return False
            tokens, cached, max_tokens = tokens + [first], len(tokens), max_tokens - 1
        state.insert(member, start, Handover(tokens[cached:], tokens[:cached], max_tokens, kv))
        return True

    def _drop_stopped(self, state: "_Generator", members: dict[int, Member]) -> None:
        gone = [uid for uid, m in members.items() if m.box.stop.is_set()]
        if not gone:
            return
        caches = state.gen.remove(gone, return_prompt_caches=True)
        for uid in gone:
            members.pop(uid).leave(caches.get(uid, (None,))[0])

    def _step(self, state: "_Generator", members: dict[int, Member]) -> None:
        gen = state.gen
        decoding = len(gen._generation_batch) > 0
        gen.prefill_step_size = PREFILL_STEP_SHARED if decoding else PREFILL_STEP
        try:
            _, responses = gen.next()
        except Exception as exc:
            log.exception("batched decode step failed")
            for uid in list(members):
                _fail(members.pop(uid), exc)
            state.reset()
            return
        broken = [uid for uid, m in members.items() if m.error is not None]
        if broken:
            gen.remove(broken)
            for uid in broken:
                member = members.pop(uid)
                _fail(member, member.error)
        for r in responses:
            member = members.get(r.uid)
            if member is None:
                continue
            try:
                ended = member.feed(r.token)
                if ended is None and r.finish_reason is not None:
                    ended = r.finish_reason == "length"
                if ended is None:
                    continue
                if r.finish_reason is None:  # ended here (a stop string): take it out of the batch
                    kv = gen.remove([r.uid], return_prompt_caches=True)[r.uid][0]
                else:
                    kv = r.prompt_cache
                members.pop(r.uid)
                member.end(ended, kv)
            except Exception as exc:
                if r.uid in members:
                    members.pop(r.uid)
                    gen.remove([r.uid])
                _fail(member, exc)


def _begin(state: "_Generator", member: Member) -> Start:
    """What a member starts from: the longest cached prefix of its prompt (or an empty cache), its sampler
    and logits processors (guarded), its output cap; its DecodeLoop is started here."""
    backend, prepared = member.backend, member.prepared
    kv, cached = backend.prompt_cache.fetch(list(prepared.tokens))
    if kv is None:
        from mlx_lm.models.cache import make_prompt_cache

        kv, cached = make_prompt_cache(state.model), 0
    sampler, processors = backend.sampler_for(prepared, member.loop, seeded=True)
    sampler, processors = _guarded(member, sampler, processors)
    member.loop.start(len(prepared.tokens), cached)
    return Start(kv, cached, sampler, processors, prepared.max_tokens)


def _first_token(state: "_Generator", kv: list, tokens: list[int], cached: int, sampler, processors) -> int:
    """A short prompt that arrives while others decode is read here, at once, and its first token sampled
    here too: the member then joins the batch with that token as its one-token prompt. Read inside the batch
    instead, its prompt would take one batch step, its last token a second, and its first token would come
    back only in a third. The prompt is read as a request alone reads it (all but the last token, then the
    last token: solo.py's step), so its first token is the one it would get alone."""
    import mlx.core as mx

    stream = state.backend.stream
    with mx.stream(stream) if stream is not None else contextlib.nullcontext():
        if len(tokens) - cached > 1:
            state.model(mx.array(tokens[cached:-1])[None], cache=kv)
            mx.eval([c.state for c in kv])
        return int(Stepper(state.model, kv, tokens, sampler, processors)(tokens[-1:]).item())


def _guarded(member: Member, sampler, processors: list) -> tuple:
    """A member's own sampler and logits processors, run inside the batched step: one that raises marks
    that member failed (it leaves the batch after this step) instead of breaking the step for everyone."""
    from mlx_lm.sample_utils import greedy_sampler

    def processed(tokens, logits):
        try:
            for processor in processors:
                logits = processor(tokens, logits)
        except Exception as exc:
            member.error = member.error or exc
        return logits

    def sample(logprobs):
        try:
            return sampler(logprobs)
        except Exception as exc:
            member.error = member.error or exc
            return greedy_sampler(logprobs)

    # the shared greedy sampler stays as it is: members that all use it are sampled in one call
    return (sampler if sampler is greedy_sampler else sample), ([processed] if processors else [])


class _Generator:
    """The BatchGenerator of the model being batched, and what it needs."""

    def __init__(self):
        self.backend = None
        self.model = None
        self.gen = None
        self.stops = None
        self._max_batch = 1

    def switch(self, backend, make_resident, max_batch: int) -> float | None:
        """Batch ``backend``'s model from now on; the seconds loading it took (None: it was resident)."""
        from mlx_lm.generate import StopSequences

        self.close()
        self.backend = None
        load_s = make_resident(backend)
        self.model = backend.model
        self.stops = StopSequences([[t] for t in backend.tokenizer.eos_token_ids])
        self._max_batch = max_batch
        self.backend = backend
        self.reset()
        return load_s

    def insert(self, member: Member, start: Start, where: Handover) -> None:
        """``member`` joins the batch from ``where`` it stands, with its own sampler and processors."""
        [member.uid] = self.gen.insert([where.prompt], max_tokens=[where.max_tokens], caches=[where.kv],
                                       all_tokens=[where.held], samplers=[start.sampler],
                                       logits_processors=[start.processors], stop_sequences=[self.stops])

    def reset(self) -> None:
        from mlx_lm.generate import BatchGenerator

        self.close()
        kwargs = {"stream": self.backend.stream} if self.backend.stream is not None else {}
        self.gen = BatchGenerator(self.model, completion_batch_size=self._max_batch,
                                  prefill_batch_size=self._max_batch, prefill_step_size=PREFILL_STEP, **kwargs)

    def close(self) -> None:
        if self.gen is not None:
            self.gen.close()
            self.gen = None


def _fail(member: Member, exc: BaseException) -> None:
    """End one member with a failure: before its Started (its model would not load), the consumer's
    exception, as when decoding one at a time; after, in-band (its stream may be open)."""
    if not member.loop.started:
        member.box.close(exc)
        return
    try:
        if not member.box.stop.is_set() and not member.loop.finished:
            log.error("generation failed: %s", exc)
            member.box.emit(Failed(f"generation failed: {exc}"))
    finally:
        member.box.close()

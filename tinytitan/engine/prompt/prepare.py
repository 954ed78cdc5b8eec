"""Prompt preparation, the part every tokenizer-backed backend shares: a ChatRequest rendered through the model's
chat template (tools declared in the family's own form, model defaults applied), tokenized (reusing the ids the
prompt cache holds), checked against the window, with its sampling settings and its grammar: a Prepared."""

from __future__ import annotations

import array
import logging
from typing import Any
import time
from dataclasses import dataclass, field

from ...chat_request import ChatRequest, Message
from ...errors import ApiError, invalid
from ...memo import BoundedMemo
from ..cache.entries import PromptFacts
from ..cache.miss import Fingerprint, compare, diagnose
from ..decode.call_limit import call_limit
from .splice import splice as splice_prompt
from .tokenizer_facts import (check_logit_bias, id_count, ids_of, once_per_tokenizer, opening_tokens, restart_tokens,
                              text_of)
from .reasoning import level_of
from ..speculative.sampling import SAMPLING
from ..structured import CompiledGrammar, GrammarMask, compile_grammar
from ..structured.best_effort import best_effort
from ..structured.compile import token_markers
from ..structured.tool_calls import (answer_after_thought, auto_call_grammar, check_custom_grammar, document_or_calls,
                                     forced_call_grammar)
from .render_failures import rendered
from .fill_in import FillInTheMiddle
from .rendering import TemplateRendering

log = logging.getLogger("tinytitan.backend")


REMEMBERED_PROMPTS = 64  # prompts kept by response id for a client's cache comparison (compare_prompt)


# what a model samples with where its generation_config.json does not say (the request may still say)
FALLBACK_SAMPLING = {k: SAMPLING[k] for k in ("temperature", "top_p", "top_k")}


def refuse_forced_continuation(req: ChatRequest) -> None:
    """A grammar (an output format, a forced call) masks the answer from its first token, where a prefill has
    begun it already: the two together are refused (each protocol names its own field for it first)."""
    if req.continue_final and (req.grammar is not None or req.tool_choice == "required"):
        last = req.final_where or f"messages[{len(req.messages) - 1}]"
        what = "an output format" if req.grammar is not None else "a forced tool call"
        raise invalid(f"A final assistant message ({last}) cannot be continued under {what}: its grammar starts "
                      "where the answer starts", param=last, code="unsupported_prefill")


@dataclass(frozen=True)
class Encoded:
    """A request's prompt as rendered and tokenized (``timed_encode``), with the seconds each took; spliced for the
    decoder, also why it misses the prompt cache where it does (``miss``: a CacheMiss) and what the entry its
    generation stores will know of it (``facts``); both None otherwise."""
    text: str
    tokens: list[int]
    render_s: float
    tokenize_s: float
    miss: Any = None
    facts: PromptFacts | None = None


@dataclass
class Prepared:
    req: ChatRequest | None  # None: a group follower's generation, opened from rank 0's message (lockstep.py)
    tokens: list[int]
    max_tokens: int
    start_in_reasoning: bool = False
    namespaces: dict[str, str] = field(default_factory=dict)
    prompt_text: str = ""
    tool_schemas: dict[str, dict] = field(default_factory=dict)  # name -> parameters schema
    render_s: float | None = None  # time spent rendering the template, and tokenizing what it wrote
    tokenize_s: float | None = None
    grammar: CompiledGrammar | None = None  # the output format the sampler is masked with
    sampling: dict = field(default_factory=dict)  # the values this generation samples with (see sampling_for)
    cache_miss: dict | None = None  # where the prompt parts from the prompt cache, and why (cache/miss.py)
    image_runs: tuple = ()  # where each image's tokens lie in ``tokens`` (prompt_cache.ImageRun), in order
    cache_compared: dict | None = None  # the same, against the earlier prompt ``req.cache_compare`` names
    # what the decoder reads of the request beyond its sampling values (taken from ``req`` when there is one)
    seed: int | None = None
    # its text decoded from its ids with the prompt's end as context, a first token's leading space kept: a raw
    # prompt's (legacy Completions), an answer continuing a prefill
    raw: bool = False
    speculative: bool = True  # it may draft (speculative decoding), where the server drafts
    cache_facts: PromptFacts | None = None  # what the entry its generation stores knows of it (cache/memory.py)
    logprobs: int | None = None  # its tokens' log probabilities, with this many alternatives (decode/logprobs.py)
    shared: bool = False  # several rows read its prompt (ChatRequest.shared_prompt: a request's choices)

    def __post_init__(self):
        if self.req is not None:
            self.seed, self.speculative, self.logprobs, self.shared = (self.req.seed, self.req.speculative,
                                                                       self.req.logprobs, self.req.shared_prompt)
            self.raw = self.req.prompt is not None or self.req.continue_final

    def facts(self) -> PromptFacts:
        """What the entry its generation stores knows of its request: a raw prompt's (legacy Completions), its
        length alone."""
        return self.cache_facts if self.cache_facts is not None else PromptFacts(len(self.tokens))

    def logits_processor(self) -> GrammarMask | None:
        """A new mask for this request's output format (None: unconstrained); one per generation."""
        return GrammarMask(self.grammar) if self.grammar is not None else None


_LONGEST_TOKEN: dict[int, tuple[Any, int]] = {}  # id(tokenizer) → (tokenizer, longest entry)
_TURN_MARKERS: dict[int, tuple[Any, dict[str, int]]] = {}  # id(tokenizer) → (tokenizer, special tokens per turn)


class PromptPreparation(TemplateRendering, FillInTheMiddle):
    """The prompt-preparation half of a backend (``Backend`` is the other half: the model, its card, decoding):
    everything from a ChatRequest to its ``Prepared``."""

    def __init__(self) -> None:
        # prompts remembered by response id, for a client's later comparison (``compare_prompt``)
        self.remembered_prompts: BoundedMemo[str, tuple[Fingerprint, array.array]] = BoundedMemo(REMEMBERED_PROMPTS)

    def encode(self, req: ChatRequest) -> tuple[str, list[int]]:
        """The rendered prompt and its tokens. A template that refuses the conversation (Jinja's
        ``raise_exception``: roles out of order, an unsupported turn) is the client's 400, not a crash.
        A raw prompt (``req.prompt``) skips the template."""
        encoded = self.timed_encode(req)
        return encoded.text, encoded.tokens

    def timed_encode(self, req: ChatRequest, splice: bool = False, fp: Fingerprint | None = None,
                     remember: bool = True) -> Encoded:
        """``encode``, timed; ``splice``: the prompt as the decoder will read it (``tokenize``, given the request's
        fingerprint ``fp`` where the caller has it), with why it misses the cache and what the cache will know;
        ``remember=False``: the same ids, the cache left as it was (a count: ``count_tokens``)."""
        t0 = time.perf_counter()
        if req.prompt_ids is not None:  # the ids as sent, checked against the vocabulary: never re-tokenized
            return Encoded(*self.raw_ids(req), 0.0, time.perf_counter() - t0)
        if req.prompt is not None:
            t1 = time.perf_counter()
            text, tokens = self.raw_prompt(req)  # (a suffix: the layout token by token, fill_in.py)
            opening = list(opening_tokens(self.tokenizer))  # (the BOS a chat template would have written)
            if opening and tokens[:len(opening)] != opening:
                tokens = opening + tokens
            return Encoded(text, tokens, t1 - t0, time.perf_counter() - t1)
        text = rendered(self.render, req)  # (a template's failure: the client's 400, or rendered again)
        t1 = time.perf_counter()
        miss = facts = None
        if splice and not remember:
            tokens = self.spliced(text)[0]
        elif splice:
            tokens, miss, facts = self.tokenize(text, req, fp)
        else:
            tokens = ids_of(self.tokenizer)(text)
        return Encoded(text, tokens, t1 - t0, time.perf_counter() - t1, miss, facts)

    def tokenize(self, text: str, req: ChatRequest | None = None, fp: Fingerprint | None = None):
        """A rendered prompt's ids: where the prompt cache holds ids for the same text at the same place (an
        answer the model generated, sent back by the client), those ids (prompt/splice.py); and where it parts
        from the cache, and why (cache/miss.py; None without a cache). The prompt is remembered with what its
        ids say and its request's fingerprint (``fp``, made here when not given), for the entry its generation
        stores: what that entry will know of the request (PromptFacts) comes back third (None without a cache)."""
        cache = getattr(self, "prompt_cache", None)
        tokens, spans = self.spliced(text)
        if cache is None:
            return tokens, None, None
        decode = text_of(self.tokenizer)
        if fp is None and req is not None:
            fp = Fingerprint.of(req)
        runs = self.image_runs(tokens, req) if req is not None else ()
        miss = diagnose(req, fp, tokens, cache.probe(tokens, runs), text) if req is not None else None
        if miss is not None and miss.missed:
            log.debug("%s: prompt cache %s%s", self.model_id, miss.log_text(), f" ({miss.detail})" if miss.detail else "")
        note = cache.remember(tokens, spans, decode, fp, runs,
                              self.lasting_prompt(tokens, req) if req is not None else None)
        return tokens, miss, note.facts()

    def spliced(self, text: str) -> tuple[list[int], tuple | None]:
        """A rendered prompt's ids as the decoder will read them (the cache's own ids for an answer it holds,
        prompt/splice.py), and their spans (None without a cache); remembers nothing (``tokenize`` does)."""
        cache = getattr(self, "prompt_cache", None)
        tokenizer = self.tokenizer
        encode = ids_of(tokenizer)
        if cache is None:
            return encode(text), None
        return splice_prompt(text, cache.candidates(), encode, text_of(tokenizer), restart_tokens(tokenizer),
                             more=cache.disk_candidates)

    def image_runs(self, tokens: list[int], req: ChatRequest) -> tuple:
        """Where the request's images lie in its prompt's tokens (prompt_cache.ImageRun each); none for a model
        that reads no images."""
        return ()

    def structured(self, req: ChatRequest) -> ChatRequest:
        """A request with an output format or a forced tool call decodes with reasoning off: a thought would
        have to be part of the document (or come before the call the grammar starts with). Said in the log
        when the request (or the server default) asked for reasoning, and reported on ``Started.sampling``
        (``reasoning: "none"``) for the protocols whose body echoes the level used."""
        if req.tool_names:  # the tools a call may name: each must be offered; the others are left out
            offered = {t.name for t in req.tools}
            for name in req.tool_names:
                if name not in offered:
                    raise invalid(f"tool_choice names the tool '{name}', which is not among the tools offered",
                                  param="tool_choice", code="invalid_value")
            # the tools a tool search loaded are declared in its results first, from the whole list: a tool
            # left out here is still one the conversation loaded (its reference is no client error)
            req = self.with_tool_declarations(req)
            req = req.with_(tools=tuple(t for t in req.tools if t.name in req.tool_names))
        if req.tool_choice == "required" and not req.tools:
            raise invalid("tool_choice requires a tool call, but no tools are offered", param="tool_choice",
                          code="invalid_value")
        forced = req.tool_choice == "required"
        if forced and req.grammar is not None:
            raise invalid("A forced tool call and a JSON output format cannot both be enforced: the answer is either "
                          "a call or the document", param="tool_choice", code="invalid_value")
        if req.grammar is None and not forced:
            return req
        if level_of(req.reasoning, level_of(self.default_reasoning, None)):
            log.info("%s: reasoning off for this request (%r was asked)",
                     f"structured output ({req.grammar.kind})" if req.grammar else "forced tool call",
                     req.reasoning if req.reasoning is not None else self.default_reasoning)
        return req.with_(reasoning=False)

    def sampling_for(self, req: ChatRequest) -> dict:
        """The values this request samples with: the request's own, else the model's defaults. Decided once
        here; the decoder uses them and ``Started`` reports them (protocols echo them, never recompute)."""
        check_logit_bias(req.logit_bias, getattr(self, "vocab_size", None) or id_count(self.tokenizer))
        model = {**SAMPLING, **{k: v for k, v in self.sampling.items() if v is not None}}
        return {k: model[k] if getattr(req, k) is None else getattr(req, k) for k in SAMPLING}

    def grammar_of(self, req: ChatRequest, start_in_reasoning: bool = False) -> CompiledGrammar | None:
        """The grammar this request's output is masked with: its output format, a forced call, or (under
        ``auto``) free text whose calls are held to strict schemas and custom tools' grammars."""
        if self.tokenizer is None:
            return None
        for tool in req.tools:  # a client grammar that cannot be compiled is refused, forced or not
            if tool.input_grammar is not None:
                check_custom_grammar(tool, self.tokenizer, getattr(self, "vocab_size", None))
        grammar = req.grammar and best_effort(req.grammar)  # (a format that is not strict: what compiles of it)
        # the markers a grammar names as tokens (made once per tokenizer, on the first request that needs them)
        markers = token_markers(self.tokenizer, getattr(self, "vocab_size", None)) if grammar or req.tools else {}
        answer = self.family.syntax.answer
        limit = call_limit(req)
        calls = True if limit is None else limit  # how many calls the grammar admits
        if grammar is not None and answer is None and req.tool_choice == "auto" and req.tools:
            # the tools stay callable beside the document (else only the document, logged)
            grammar = document_or_calls(grammar, self.family, list(req.tools), calls, markers,
                                        start_in_reasoning) or grammar
        if grammar is not None and answer is not None:  # the answer sits inside the syntax's markup (harmony)
            grammar = answer(grammar, markers)
        elif grammar is not None:
            grammar = answer_after_thought(grammar, self.family, markers, start_in_reasoning)
        if grammar is None and req.tool_choice == "required":
            grammar = forced_call_grammar(self.family, list(req.tools), calls, markers, start_in_reasoning)
        elif grammar is None and req.tool_choice == "auto" and req.tools:
            grammar = auto_call_grammar(self.family, list(req.tools), calls, markers, start_in_reasoning)
        if grammar is None:
            return None
        return compile_grammar(grammar, self.tokenizer, getattr(self, "vocab_size", None))

    @property
    def longest_token(self) -> int:
        """Characters in the vocabulary's longest entry. A byte-level entry has one character per byte, never
        fewer than the text characters it stands for: no token covers more of a text than this. Measured
        once per tokenizer (reading a vocabulary costs tens of milliseconds)."""
        if self._longest_token is None:
            self._longest_token = once_per_tokenizer(
                _LONGEST_TOKEN, self.tokenizer, lambda: max(map(len, self.tokenizer.get_vocab()), default=1) or 1)
        return self._longest_token

    @property
    def turn_markers(self) -> dict[str, int]:
        """Per role, the special tokens the chat template writes around every turn of that role (ChatML's
        ``<|im_start|>`` and ``<|im_end|>``: 2), measured once per tokenizer from three turns against one. Only
        special tokens count: they never merge with a turn's text, so they add to any bound on its text. A role
        the measurement cannot take (a template that merges or refuses repeated turns) counts 0."""
        return once_per_tokenizer(_TURN_MARKERS, self.tokenizer, self._measure_turn_markers)

    def _measure_turn_markers(self) -> dict[str, int]:
        try:
            special = {int(i) for i, t in self.tokenizer.added_tokens_decoder.items() if getattr(t, "special", False)}
        except Exception:
            return {}
        out = {}
        for role in ("user", "assistant"):
            try:
                counts = []
                for n in (1, 3):
                    req = ChatRequest(model="", messages=(Message("user", "x"),) * (role == "assistant") +
                                      (Message(role, "x"),) * n)
                    counts.append(sum(t in special for t in self.encode(req)[1]))
                out[role] = max(0, (counts[1] - counts[0]) // 2)
            except Exception:  # the template refuses repeated turns: no bound from this role
                out[role] = 0
        return out

    def token_floor(self, req: ChatRequest) -> int | None:
        """A lower bound on the prompt's tokens, without rendering or tokenizing it: the text of its messages
        (which the template only adds to) over the longest token, plus the special tokens the template writes
        around each turn (see ``turn_markers``). None where the request has no more characters and no more
        turns than the window has tokens (it cannot be refused from this bound: the vocabulary is not even
        read)."""
        chars = len(req.prompt) if req.prompt is not None else sum(len(m.content) for m in req.messages)
        turns = 0 if req.prompt is not None else len(req.messages)
        if chars <= self.context_window and turns <= self.context_window:
            return None
        floor = -(-chars // self.longest_token)  # each token covers at most longest_token characters
        if turns > self.context_window:
            markers = self.turn_markers
            floor += sum(markers.get(m.role, 0) for m in req.messages)
        return floor

    def refuse_from_bound(self, req: ChatRequest) -> None:
        """Refuse a prompt its lower bound already puts over the context window, before rendering and
        tokenizing megabytes (13-21 s of CPU and ~2.5 GB kept for a 30 MB prompt; 20 s for 200,000 turns)."""
        floor = self.token_floor(req) if self.tokenizer is not None else None
        if floor is not None and floor > self.context_window:
            raise self.too_long(floor, at_least=True)

    def too_long(self, tokens: int, at_least: bool = False) -> ApiError:
        """A prompt with no room left for an answer's first token: over the window, or filling it exactly."""
        fits = "leaves no room for an answer in" if tokens == self.context_window else "does not fit"
        return invalid(f"The prompt is {'at least ' if at_least else ''}{tokens} tokens, which {fits} the "
                       f"model's context window of {self.context_window} tokens", param="messages",
                       code="context_length_exceeded",
                       data={"prompt_tokens": tokens, "context_window": self.context_window})

    def with_model_defaults(self, req: ChatRequest) -> ChatRequest:
        """The request with the model's own stop strings where it sends none: a request's own replace them (as
        Ollama's request options replace its Modelfile's; its sampling values: ``sampling_for``)."""
        if self.default_stop and not req.stop:
            return req.with_(stop=self.default_stop)
        return req

    def prepare(self, req: ChatRequest) -> Prepared:
        refuse_forced_continuation(req)
        req = self.structured(req)
        req = self.with_model_defaults(req)
        self.refuse_from_bound(req)
        # the request's fingerprint, made once for the prompt cache and the client's comparison where it asks one
        fp = Fingerprint.of(req) if req.cache_compare is not None or req.response_id is not None else None
        encoded = self.timed_encode(req, splice=True, fp=fp)
        text, tokens, miss = encoded.text, encoded.tokens, encoded.miss
        if not tokens:  # a raw prompt of "" (legacy completions): nothing to continue, and no model runs on none
            raise invalid("The prompt is empty: there is nothing to continue (send at least one token of text)",
                          param="messages", code="invalid_value")
        room = self.context_window - len(tokens)
        if room < 1:
            raise self.too_long(len(tokens))
        max_tokens = room if req.max_tokens is None else min(req.max_tokens, room)
        start_in_reasoning = self.family.starts_in_reasoning(text)
        if req.continue_final:  # the answer goes on inside the prefill: in a thought where it opened one
            start_in_reasoning = self.family.leaves_thought_open(req.messages[-1].content)
        compiled = self.grammar_of(req, start_in_reasoning)
        namespaces = {t.name: t.namespace for t in req.tools if t.namespace}
        schemas = {t.name: t.parameters for t in req.tools}
        sampling = self.sampling_for(req)
        if req.grammar is not None or req.tool_choice == "required":
            sampling["reasoning"] = "none"  # turned off by ``structured``: a protocol with a place for it says so
        compared = self.compare_prompt(req, tokens, fp, text)
        return Prepared(req, tokens, max_tokens, start_in_reasoning, namespaces, text, schemas, render_s=encoded.render_s,
                        tokenize_s=encoded.tokenize_s, grammar=compiled, sampling=sampling,
                        cache_miss=miss.as_dict() if miss is not None else None,
                        cache_compared=compared.as_dict() if compared is not None else None, cache_facts=encoded.facts)

    def compare_prompt(self, req: ChatRequest, tokens: list[int], fp: Fingerprint | None, text: str | None = None):
        """The prompt against the earlier one ``req.cache_compare`` names (a CacheMiss; None when it names none),
        and this prompt remembered under ``req.response_id`` for a later comparison (the
        ``REMEMBERED_PROMPTS`` most recently remembered or compared against, as 32-bit ids); ``fp``: the request's fingerprint (None when it names neither);
        ``text``: the prompt as rendered."""
        if req.cache_compare is None and req.response_id is None:
            return None
        known = self.remembered_prompts
        out = compare(req, fp, tokens, known.get(req.cache_compare), text) if req.cache_compare is not None else None
        if req.response_id is not None:
            known.put(req.response_id, (fp, array.array("i", tokens)))
        return out

    def count_tokens(self, req: ChatRequest) -> int:
        """The prompt's length as ``prepare`` renders and splices it. A prompt over the window is still counted,
        except one whose lower bound is already over it: that is refused as generation would refuse it,
        unrendered. A forced call or an output format is rendered as ``prepare`` renders it (``structured``:
        reasoning off, only the named tools declared)."""
        req = self.structured(req)
        self.refuse_from_bound(req)
        # spliced as ``prepare`` splices it: an answer the cache holds counts as the ids the model generated,
        # which its text tokenized again rarely is
        return len(self.timed_encode(req, splice=True, remember=False).tokens)

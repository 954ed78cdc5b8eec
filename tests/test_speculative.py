"""Speculative decoding's parts, each against the real MLX path (the demo model) where a model is involved.

The prompt-lookup proposer, the draft-length policy and its off-switch, the accept rule, the per-row
sampler (a seeded request draws what it draws without drafts), and whole lone decodes: greedy with drafts
equals greedy without, token for token, with draft tokens really accepted; a seeded sampled request too; a
grammar-masked request too, its matcher standing where decoding without drafts leaves it; the KV cache holds
exactly what decoding one token at a time leaves behind, also when the consumer stops early.
"""

from __future__ import annotations

import pytest

from tinytitan.engine.speculative.lookup import PromptLookup
from tinytitan.engine.speculative.policy import DraftPolicy
from tinytitan.engine.speculative.verify import accepted_prefix, usable_draft
from speculative_helpers import COPY_TEXT, plain_decode


# -- prompt lookup ---------------------------------------------------------------------------------------------
def test_lookup_proposes_what_followed_the_longest_latest_match():
    look = PromptLookup([1, 2, 3, 9, 1, 2, 3, 4, 5, 6, 7, 2, 3], min_ngram=2, max_ngram=3)
    # "2 3" occurred twice before; the latest (followed by 4 5 6) wins
    assert look.propose(3) == [4, 5, 6]
    look.extend([9])
    # "2 3 9" (3 tokens) matched at the start: longer than any 2-gram match
    assert look.propose(4) == [1, 2, 3, 4]
    assert look.propose(0) == []


def test_lookup_without_a_match_proposes_nothing():
    look = PromptLookup([1, 2, 3, 4], min_ngram=2, max_ngram=4)
    assert look.propose(5) == []
    assert PromptLookup([]).propose(3) == []
    with pytest.raises(ValueError):
        PromptLookup([], min_ngram=3, max_ngram=2)


def test_lookup_continues_a_repeating_run_past_the_end():
    look = PromptLookup([7, 8, 7, 8, 7], min_ngram=2, max_ngram=2)
    assert look.propose(5) == [8, 7, 8, 7, 8]


def test_lookup_indexes_a_prompt_when_first_asked_and_proposes_as_if_indexed_token_by_token():
    """Opening a lookup over a long prompt indexes nothing (a row's first forward pass does not wait for it);
    the first proposal catches up, and from then on, however the history grew (in one go, token by token, or
    both between proposals), every proposal is the one a token-by-token index gives."""
    import random

    def reference(seq, k, lo=2, hi=4):  # the longest latest earlier match, found by looking at every position
        for n in range(min(hi, len(seq) - 1), lo - 1, -1):
            starts = [i for i in range(n, len(seq)) if seq[i - n:i] == seq[-n:]]
            if starts:
                start, draft = starts[-1], []
                for j in range(k):
                    draft.append(seq[start + j] if start + j < len(seq) else draft[start + j - len(seq)])
                return draft
        return []

    rng = random.Random(7)
    prompt = [rng.randrange(12) for _ in range(3000)]
    look = PromptLookup(prompt)
    assert len(look) == 3000 and all(not index for index in look._index)  # nothing indexed yet
    history = list(prompt)
    for step in range(300):
        assert look.propose(6) == reference(history, 6), step
        more = [rng.randrange(12) for _ in range(rng.choice((1, 1, 1, 5)))]
        if step % 3:
            look.extend(more)
        else:
            for token in more:
                look.extend([token])
        history += more
    assert look.tokens == history


# -- the policy ------------------------------------------------------------------------------------------------
def test_policy_k_grows_with_accepted_drafts_and_falls_back_on_a_miss():
    p = DraftPolicy(start=4, k_max=16)
    assert p.k() == 4
    p.record(4, 4)
    assert p.k() == 8
    p.record(8, 8)
    p.record(16, 16)
    assert p.k() == 16
    p.record(16, 2)
    assert p.k() == 3
    p.record(3, 0)
    assert p.k() == 1
    assert (p.drafted, p.accepted, p.steps) == (47, 30, 5)


def test_policy_switches_off_when_acceptance_does_not_pay_and_tries_again_later():
    p = DraftPolicy(start=2, window=3, pays_above=0.25, cooldown=4, max_cooldown=8)
    for _ in range(3):
        p.record(2, 0)
    assert p.off and p.k() == 0
    p.skipped(3)
    assert p.off
    p.skipped(1)
    assert not p.off and p.k() == 2
    for _ in range(3):
        p.record(2, 0)
    p.skipped(7)  # the pause doubled
    assert p.off
    p.skipped(1)
    assert p.k() == 2


def test_policy_acceptance_is_that_of_its_recent_verifies():
    """What the batch expects a row's next draft to earn: the last ``window`` verifies (with a prior of one
    accepted in two), not the whole turn — a copy comes in runs."""
    p = DraftPolicy(start=4, window=3)
    assert p.acceptance() == 0.5
    for _ in range(5):
        p.record(4, 0)  # a stretch of guesses
    for _ in range(3):
        p.record(8, 8)  # then a copy
    assert p.acceptance() == pytest.approx(25 / 26)
    assert (p.drafted, p.accepted) == (44, 24)


def test_policy_stays_on_while_drafts_pay():
    p = DraftPolicy(start=4, window=3)
    for _ in range(10):
        p.record(4, 2)
    assert not p.off and p.k() == 3


# -- the accept rule -------------------------------------------------------------------------------------------
def test_accepted_prefix_is_the_agreeing_run():
    assert accepted_prefix([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted_prefix([5, 6, 7], [5, 6, 7, 8]) == 3
    assert accepted_prefix([5, 6, 7], [4, 6, 7, 8]) == 0
    assert accepted_prefix([], [3]) == 0


def test_usable_draft_stops_before_end_of_sequence():
    assert usable_draft([1, 2, 99, 3], last=0, eos=(99,)) == [1, 2]
    assert usable_draft([99], last=0, eos=(99,)) == []


EOS: set = set()  # the demo model's ends of turn, filled by ``demo``


# -- against the demo model ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(demo_backend):
    model = demo_backend.ensure_loaded()
    TOKENIZERS[id(model)] = demo_backend.tokenizer
    EOS.update(demo_backend.tokenizer.eos_token_ids)  # (what plain_decode ends at: ``eos=EOS``)
    return model, demo_backend.tokenizer


def copy_prompt(tok, text: str = COPY_TEXT) -> list[int]:
    return tok.apply_chat_template([{"role": "user", "content": "Show this again, exactly:\n" + text}],
                                   add_generation_prompt=True)


class StepBackend:
    """What a decoder row asks its backend for, around the demo model: the test's own sampler, processors and
    proposer, a prompt cache of one entry (``kv`` holding ``cached`` tokens; what a row leaves is ``stored``)."""

    max_bytes = 0  # (a cache that cannot be trimmed back would leave a checkpoint of its prompt: none fits)

    def __init__(self, model, tok, sampler, processors, mask, eos, policy, proposer, kv, cached):
        self.model, self.tokenizer, self.stream = model, tok, None
        self.hooks = (sampler, list(processors))
        self.mask, self.eos, self.policy, self.proposer = mask, eos, policy, proposer
        self.cached, self.stored = (kv, cached), None
        self.prompt_cache = self

    def start(self, prepared, model, reuse=True, handed=None):
        from mlx_lm.models.cache import make_prompt_cache

        kv, cached = self.cached
        return (kv, cached, cached) if kv is not None else (make_prompt_cache(model), 0, 0)

    def store(self, tokens, kv, images=(), **_facts):
        self.stored = (list(tokens), kv)

    def holds(self, tokens, images=()):
        return self.stored is not None and self.stored[0] == list(tokens)

    def sampler_for(self, prepared, loop):
        return self.hooks

    def speculator(self, prepared, loop, tokens):
        from tinytitan.engine.speculative.speculator import Speculator

        return Speculator(self.proposer or PromptLookup(tokens), self.policy, mask=self.mask, eos=self.eos,
                          always=self.proposer is not None, known=len(tokens))


def drafted_decode(model, ids, max_tokens, sampler, processors=(), mask=None, eos=(), policy=None, kv=None,
                   cached=0, proposer=None, stop_when=None, backend=None):
    """``ids`` decoded by the engine's decode step (scheduler.Scheduler, one row alone, drafting): its tokens, how
    many came from accepted drafts, the draft policy; ``stop_when(row)``: its consumer leaves once it says so."""
    from tinytitan.chat_request import ChatRequest
    from tinytitan.engine.prompt.prepare import Prepared
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.decode.scheduler import Scheduler
    from tinytitan.engine.decode.plan import PREFILL_STEP
    from tinytitan.engine.prompt.raw import VerbatimParser
    from tinytitan.engine.decode.rows import Row

    policy = policy or DraftPolicy()
    backend = backend or StepBackend(model, demo_tokenizer(model), sampler, processors, mask, eos, policy, proposer,
                                     kv, cached)
    prepared = Prepared(req=ChatRequest(model="demo", messages=()), tokens=list(ids), max_tokens=max_tokens)
    loop = DecodeLoop(VerbatimParser(), (), lambda _ev: None)
    loop.grammar_mask = mask
    row = Row(backend, prepared, loop=loop,
              should_stop=lambda: stop_when is not None and stop_when(row))
    scheduler = Scheduler(lambda _b: None, 1, PREFILL_STEP, seeded=True)
    scheduler.admit(row)
    while scheduler.rows:
        scheduler.step(lambda: False)
    assert row.ending is not None and row.ending.kind != "failed", row.ending
    return row.generated, backend.policy.accepted, backend.policy


TOKENIZERS: dict = {}


def demo_tokenizer(model):
    return TOKENIZERS[id(model)]


def test_greedy_with_drafts_is_token_for_token_greedy_without(demo):
    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    ids = copy_prompt(tok)
    want = plain_decode(model, ids, 96, eos=EOS)
    got, accepted, policy = drafted_decode(model, ids, 96, RowSampler())
    assert got == want
    assert accepted >= 1 and policy.steps > 0  # the drafts were really used, not just proposed
    assert accepted == policy.accepted


def test_row_sampler_draws_each_row_as_the_seeded_process_wide_key_draws_one_at_a_time():
    """The one sampler, seeded, draws what mlx-lm's own sampler draws after ``mx.random.seed`` (a lone request
    decoded by ``stream_generate``), also when a verify draws several rows at once and uses only some."""
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler

    from tinytitan.engine.speculative.sampling import RowSampler

    logits = mx.random.normal((5, 50), key=mx.random.key(3))
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    one = make_sampler(temp=0.9, top_p=0.95, top_k=20)
    mx.random.seed(11)
    want = [int(one(logprobs[i:i + 1]).item()) for i in range(5)]
    rows = RowSampler(0.9, 0.95, 0.0, 20, seed=11)
    first = rows(logprobs[:3]).tolist()
    rows.accept(2)  # the third row's draw was not used: its key is drawn again for the next position
    rest = rows(logprobs[2:]).tolist()
    rows.accept(3)
    assert first[:2] + rest == want


def test_seeded_sampled_decode_with_drafts_gives_the_tokens_without(demo):
    from mlx_lm.sample_utils import make_sampler

    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    ids = copy_prompt(tok)

    def sharpen(tokens, logits):  # the demo model's random weights give near-flat logits: peak them
        return logits * 120

    want = plain_decode(model, ids, 64, sampler=make_sampler(temp=1.0, top_p=0.95), processors=[sharpen], seed=5,
                        eos=EOS)
    got, accepted, _ = drafted_decode(model, ids, 64, RowSampler(1.0, 0.95, seed=5), [sharpen])
    assert got == want
    assert accepted > 0
    assert want != plain_decode(model, ids, 64, eos=EOS)  # really sampled: not the greedy answer


def test_grammar_masked_decode_with_drafts_matches_and_leaves_the_matcher_where_it_was(demo):
    from mlx_lm.sample_utils import make_sampler

    from tinytitan.chat_request import Grammar
    from tinytitan.engine.speculative.sampling import RowSampler
    from tinytitan.engine.structured.compile import compile_grammar
    from tinytitan.engine.structured.processor import GrammarMask

    model, tok = demo
    schema = {"type": "object", "properties": {"code": {"type": "string", "minLength": 80, "maxLength": 400}},
              "required": ["code"], "additionalProperties": False}
    compiled = compile_grammar(Grammar("json_schema", schema), tok, model.args.vocab_size)
    ids = copy_prompt(tok, '{"code":"' + COPY_TEXT.replace("\n", "\\n") + '"}')
    eos = tuple(tok.eos_token_ids)
    plain_mask = GrammarMask(compiled)
    want = plain_decode(model, ids, 120, sampler=make_sampler(temp=0), processors=[plain_mask], eos=EOS)
    ends = [i for i, t in enumerate(want) if t in eos]
    want = want[:ends[0] + 1] if ends else want  # mlx-lm's step decodes on past the end of the turn
    mask = GrammarMask(compiled)
    got, accepted, policy = drafted_decode(model, ids, 120, RowSampler(), [mask], mask, eos)
    assert got == want[:len(got)] and len(got) == len(want)
    assert policy.drafted > 0
    assert accepted > 0 and mask.matcher.is_accepting()
    # the matcher has consumed every token but the last (the mask consumes it at its next call), as a matcher
    # fed those tokens one by one has: the same next-token mask
    import numpy as np
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    fresh = compiled.matcher()
    assert fresh.consume_tokens(got[:-1])
    masks = [allocate_token_bitmask(1, compiled.vocab_size) for _ in range(2)]
    fill_next_token_bitmask(fresh, masks[0])
    fill_next_token_bitmask(mask.matcher, masks[1])
    assert np.array_equal(masks[0], masks[1])


def test_the_cache_holds_what_one_token_at_a_time_leaves_also_when_the_consumer_stops_early(demo):
    from tinytitan.engine.cache.entries import kv_offset
    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    ids = copy_prompt(tok)
    full = plain_decode(model, ids, 60, eos=EOS)
    backend = StepBackend(model, tok, RowSampler(), [], None, (), DraftPolicy(), None, None, 0)
    seen, accepted, _ = drafted_decode(model, ids, 60, None, backend=backend,
                                       stop_when=lambda row: row.speculator.accepted > 0)
    assert accepted > 0 and len(seen) < 60  # its consumer left once a draft was used
    assert seen == full[:len(seen)]
    stored, kv = backend.stored
    assert stored == ids + seen and kv_offset(kv) == len(ids) + len(seen) - 1
    # ... and a request that goes on from that cache decodes what it would have decoded anyway
    more = ids + seen
    got, _, _ = drafted_decode(model, more, 20, RowSampler(), kv=kv, cached=len(more) - 1)
    assert got == full[len(seen):len(seen) + 20]


# -- a draft model ---------------------------------------------------------------------------------------------
def test_a_draft_model_with_the_same_tokenizer_drafts_and_greedy_output_is_unchanged(demo, demo_backend):
    from tinytitan.engine.speculative.draft_model import DraftModelProposer, load_draft_model
    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    draft = load_draft_model(demo_backend.path, tok, name="demo")  # the model as its own draft: all agree
    ids = tok.apply_chat_template([{"role": "user", "content": "Write anything."}], add_generation_prompt=True)
    want = plain_decode(model, ids, 40, eos=EOS)
    proposer = DraftModelProposer(draft, ids)
    policy = DraftPolicy(start=3, k_max=3)
    got, _, _ = drafted_decode(model, ids, 40, RowSampler(), policy=policy, proposer=proposer)
    assert got == want
    assert policy.accepted == policy.drafted > 20  # the same weights guess every token
    # the next request reuses what the draft's cache holds of this one: only the new tokens are fed
    proposer.reset(ids + want[:10])
    held = len(proposer.held)
    assert proposer._follow() == (ids + want[:10])[min(held, len(ids) + 10 - 1):]


def test_a_draft_model_reads_a_long_prompt_a_chunk_a_proposal_then_guesses_as_if_read_at_once(demo, demo_backend):
    """A prompt longer than the proposer's step is read one chunk per proposal, with no draft until it is all
    in (a step that asks for a draft takes no longer than one chunk: the batch's other rows and a group's
    watchdog wait no longer); then its guesses are those of a proposer that read it at once, and decoding with
    it is decoding without drafts, token for token."""
    from tinytitan.engine.speculative.draft_model import DraftModelProposer, load_draft_model
    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    draft = load_draft_model(demo_backend.path, tok, name="demo")
    ids = copy_prompt(tok)
    step = 16
    assert len(ids) > 4 * step
    chunked, whole = DraftModelProposer(draft, ids, prefill_step=step), DraftModelProposer(draft, ids)
    proposals = []
    while not (got := chunked.propose(3)):
        proposals.append(len(chunked.held))
    assert proposals == list(range(step, len(ids) - 1, step))[:len(proposals)] and len(proposals) >= 4
    assert len(ids) - 1 - len(chunked.held) <= step
    assert got == whole.propose(3)
    want = plain_decode(model, ids, 24, eos=EOS)
    policy = DraftPolicy(start=3, k_max=3)
    got, _, _ = drafted_decode(model, ids, 24, RowSampler(), policy=policy,
                               proposer=DraftModelProposer(draft, ids, prefill_step=step))
    assert got == want and policy.accepted > 0


def test_a_draft_model_whose_tokenizer_differs_is_refused_by_name(demo_backend, tmp_path):
    import json
    import shutil

    from mlx_lm.utils import load_tokenizer

    from tinytitan.engine.speculative.draft_model import DraftModelRefused, load_draft_model, tokenizer_mismatch

    other = tmp_path / "other"
    shutil.copytree(demo_backend.path, other)
    spec = json.loads((other / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]  # two tokens trade ids: same size, same words, other ids
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(spec))
    why = tokenizer_mismatch(demo_backend.tokenizer, load_tokenizer(other))
    assert why is not None and "2 of the model's" in why
    with pytest.raises(DraftModelRefused, match=r"--draft-model other-model: its tokenizer does not agree"):
        load_draft_model(other, demo_backend.tokenizer, name="other-model")
    assert tokenizer_mismatch(demo_backend.tokenizer, load_tokenizer(demo_backend.path)) is None


class Windowed:
    """The demo model with a sliding-window cache in every layer (as Gemma's and gpt-oss's local layers have)."""

    def __init__(self, model, size: int):
        self.model, self.size, self.layers = model, size, model.layers

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def make_cache(self):
        from mlx_lm.models.cache import RotatingKVCache

        return [RotatingKVCache(max_size=self.size) for _ in self.layers]


def test_a_cache_that_cannot_always_be_trimmed_is_named_so():
    from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache

    from tinytitan.engine.cache.entries import kv_stays_trimmable

    assert kv_stays_trimmable([KVCache(), CacheList(KVCache(), KVCache())])
    assert not kv_stays_trimmable([KVCache(), RotatingKVCache(max_size=4096)])  # trimmable now, not past its window
    assert not kv_stays_trimmable([KVCache(), CacheList(KVCache(), ArraysCache(2))])
    assert not kv_stays_trimmable(object())  # no KV cache at all (a scripted run)


def test_a_row_on_a_sliding_window_cache_decodes_without_drafts_and_gives_the_same_tokens(demo):
    """Past its window a rotating cache cannot be trimmed: a rejected draft would stay in it and every later
    token would be computed on it. Such a row does not draft, and decodes what mlx-lm decodes."""
    from tinytitan.engine.speculative.sampling import RowSampler

    model, tok = demo
    windowed = Windowed(model, 48)
    TOKENIZERS[id(windowed)] = tok
    ids = copy_prompt(tok)
    assert len(ids) > 48
    want = plain_decode(windowed, ids, 48, eos=EOS)
    policy = DraftPolicy()
    got, accepted, _ = drafted_decode(windowed, ids, 48, RowSampler(), policy=policy)
    assert got == want and policy.drafted == 0


def test_a_draft_model_whose_cache_cannot_always_be_trimmed_is_refused_by_name(demo, demo_backend, monkeypatch):
    import mlx_lm.utils

    from tinytitan.engine.speculative.draft_model import DraftModelRefused, load_draft_model

    model, tok = demo
    monkeypatch.setattr(mlx_lm.utils, "load_model", lambda path, **kw: (Windowed(model, 64), {}))
    with pytest.raises(DraftModelRefused, match=r"--draft-model windowed: its KV cache cannot always be trimmed"):
        load_draft_model(demo_backend.path, tok, name="windowed")

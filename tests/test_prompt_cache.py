"""Prompt cache: longest-prefix reuse, exact cached_tokens, LRU within a byte budget, greedy output
identical with and without the cache, and a per-session billing header that does not defeat it."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.cache.prefix_index import common_prefix
from tinytitan.engine.cache.memory import PromptCache


def test_longest_prefix_and_lru_bookkeeping():
    c = PromptCache(max_bytes=1 << 30, max_entries=2)
    assert c.fetch([1, 2, 3]) == (None, 0)
    c.store([1, 2, 3, 4, 5], None)
    c.store([1, 2, 9, 9], None)
    assert c.fetch([1, 2, 3, 4, 5, 6])[1] == 5
    assert c.fetch([1, 2, 3, 4, 5])[1] == 4  # one prompt token is always left to process
    assert c.fetch([1, 2, 9, 9, 9])[1] == 4
    assert c.fetch([7])[1] == 0
    c.store([5, 5, 5], None)  # a third entry evicts the least recently used
    assert len(c.entries) == 2
    # a stored sequence supersedes entries that are its prefixes
    c.store([5, 5, 5, 6], None)
    assert [list(e.tokens) for e in c.entries.values()].count([5, 5, 5]) == 0


def test_a_prefix_too_big_for_the_budget_is_not_kept_and_says_so(caplog):
    class Layer:
        offset, nbytes = 3000, 3 << 20

    c = PromptCache(max_bytes=2 << 20)
    c.store(list(range(3000)), [Layer()])
    assert not c.entries
    assert "3000-token prefix needs 3 MiB, more than --prompt-cache-mib 2" in caplog.text


def test_a_cache_turned_off_warns_of_no_prefix_it_does_not_keep(caplog):
    """``--prompt-cache-mib 0`` is the cache off on purpose: each request's prefix not kept is no warning (one a
    request would be noise), a debug line at most; a real budget too small still warns (above)."""
    import logging

    class Layer:
        offset, nbytes = 3000, 3 << 20

    c = PromptCache(max_bytes=0)
    with caplog.at_level(logging.DEBUG, logger="tinytitan"):
        c.store(list(range(3000)), [Layer()])
    assert not c.entries
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_a_follower_counts_each_entry_at_rank_0s_size_and_so_evicts_alike():
    """Under pipeline parallelism each rank holds other layers: a follower's KV for a prefix is not rank 0's size.
    Counted at rank 0's size (its message carries it: group/lockstep.py), the follower evicts what rank 0 evicts
    when the budget is reached, and keeps none of what rank 0 kept none of (0)."""
    from tinytitan.engine.cache.entries import Kept

    class Layer:
        def __init__(self, offset, nbytes):
            self.offset, self.nbytes = offset, nbytes

        def is_trimmable(self):
            return True

    rank0, follower = PromptCache(max_bytes=10 << 20), PromptCache(max_bytes=10 << 20)
    for first, mib in ((0, 4), (100, 4), (200, 4)):  # the third pushes the first out on rank 0
        tokens = list(range(first, first + 50))
        key = rank0.store(tokens, [Layer(50, mib << 20)])
        follower.store(tokens, [Layer(50, (mib - 3) << 20)], like=rank0.kept(key))  # a rank holding less
    assert [list(e.tokens[:1]) for e in rank0.entries.values()] == [[100], [200]]
    assert [list(e.tokens[:1]) for e in follower.entries.values()] == [[100], [200]]
    assert follower.store(list(range(300, 350)), [Layer(50, 1 << 20)], like=Kept(0, 0)) is None  # rank 0 kept none
    assert len(follower.entries) == 2


def test_common_prefix():
    assert common_prefix(np.array([1, 2, 3]), np.array([1, 2, 4])) == 2
    assert common_prefix(np.array([1, 2]), np.array([1, 2, 3])) == 2
    assert common_prefix(np.array([], dtype=np.int64), np.array([1])) == 0


def _req(msgs, reasoning=False, **kw):
    return ChatRequest(model="tinytitan-demo", messages=tuple(Message(r, c) for r, c in msgs), temperature=0,
                       reasoning=reasoning, **kw)


async def _run(engine, req):
    async with engine.session(req) as events:
        prepared, events = events.prepared, [ev async for ev in events]
    text = "".join(getattr(ev, "text", "") for ev in events if type(ev).__name__ in ("TextDelta", "ReasoningDelta"))
    return prepared, events[0].cached_tokens, events[-1], text


async def test_reuse_is_exact_and_output_unchanged(demo_backend):
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    first = _req([("system", "You write code."), ("user", "Write a function.")], max_tokens=12)
    p1, cached1, fin1, text1 = await _run(engine, first)
    assert cached1 == 0
    # the same prompt again: everything but the last token is reused, and greedy output is identical
    p2, cached2, fin2, text2 = await _run(engine, first)
    assert cached2 == len(p2.tokens) - 1
    assert text2 == text1 and fin2.usage.completion_tokens == fin1.usage.completion_tokens
    # the conversation continues: the cached part is exactly the shared prefix with what the cache holds
    entry_tokens = [list(e.tokens) for e in demo_backend.prompt_cache.entries.values()]
    follow = _req([("system", "You write code."), ("user", "Write a function."), ("assistant", text1),
                   ("user", "Now test it.")], max_tokens=4)
    p3 = await engine.prepare(follow)
    expected = max(common_prefix(np.array(t), np.array(p3.tokens)) for t in entry_tokens)
    _, cached3, _, _ = await _run(engine, follow)
    assert cached3 == min(expected, len(p3.tokens) - 1)
    assert cached3 >= len(p1.tokens) - 6  # up to the empty think block the template drops from history
    # the same follow-up with no cache decodes the same tokens
    demo_backend.prompt_cache.clear()
    _, cached4, _, text4 = await _run(engine, follow)
    assert cached4 == 0
    demo_backend.prompt_cache.clear()
    _, _, _, text5 = await _run(engine, follow)
    assert text4 == text5


async def test_a_turn_the_template_writes_otherwise_once_answered_gives_way_to_the_next(demo_backend):
    """Qwen3's template with its thinking off opens the turn it generates with an empty think block, which it leaves
    out of the turns already answered: each next prompt parts from the last entry just before its answer. The
    entry knows the part of its prompt a later turn repeats (all but that block), so the next turn's entry
    supersedes it: one entry per conversation, where every turn left a copy of the whole conversation before.
    What each turn reads cached is unchanged; another conversation over the same system prompt stays, and so does
    the turn's entry beside a side request that forks the conversation where the answer began (a user turn of its
    own in place of the answer)."""
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    await _run(engine, _req([("system", "You write code."), ("user", "Write a class.")], max_tokens=4))
    turns, before = [("system", "You write code."), ("user", "Write a function.")], None
    for k in range(4):
        p, cached, fin, text = await _run(engine, _req(turns, max_tokens=6))
        assert p.prompt_text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        if before is not None:  # all the last prompt held but its think block, and the answer's text
            assert cached >= len(before.tokens) - 4
        entry = max(demo_backend.prompt_cache.entries.values(), key=lambda e: e.used).key  # this turn's
        await _run(engine, _req(turns + [("user", "Suggest a title.")], max_tokens=2))  # forks before the answer
        assert entry in demo_backend.prompt_cache.entries
        turns, before = turns + [("assistant", text), ("user", f"And now part {k}.")], p
    held = [e for e in demo_backend.prompt_cache.entries.values() if "title" not in demo_backend.tokenizer.decode(e.tokens)]
    assert len(held) == 2


async def test_an_entry_whose_final_answer_a_new_user_message_follows_gives_way(demo_backend):
    """With thinking on, a Qwen3-style template renders the thinking of a tool loop's turns until a new user message
    comes, then drops it: the request after a final answer parts from the loop's entry far back, inside that
    thinking, where no rule on the ids alone can tell it from another conversation's. That request continues the
    entry's after its final answer (an answer that calls no tool), so the entry gives way: every later request of
    the conversation goes on from a user message. A side request that forks the loop after an answer that calls a
    tool leaves the entry alone: the loop goes on from it."""
    from tinytitan.chat_request import ToolCall
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    call, then = ToolCall("call_1", "read", '{"path": "a.py"}'), ToolCall("call_2", "read", '{"path": "b.py"}')
    thought = "I should read a.py first. " * 6
    loop = (Message("system", "You are an agent."), Message("user", "Look at a.py."),
            Message("assistant", "Let me look.", (call,), reasoning=thought),
            Message("tool", "x = 1", tool_call_id="call_1", name="read"))

    def req(*messages):
        return ChatRequest(model="tinytitan-demo", messages=loop + messages, temperature=0, reasoning=True,
                           max_tokens=6)

    def holds(prepared) -> bool:
        return any(common_prefix(e.tokens, np.array(prepared.tokens)) == len(prepared.tokens)
                   for e in demo_backend.prompt_cache.entries.values())

    first, _, _, text = await _run(engine, req())
    assert thought in first.prompt_text
    side, _, _, _ = await _run(engine, req(Message("assistant", text, (then,)),  # the loop went on: a call
                                           Message("tool", "y = 2", tool_call_id="call_2", name="read"),
                                           Message("user", "Side: suggest a title.")))
    assert thought not in side.prompt_text and holds(first)  # forked far back; the loop's entry stays
    after, cached, _, _ = await _run(engine, req(Message("assistant", text), Message("user", "Now b.py.")))
    assert thought not in after.prompt_text and cached < len(first.tokens) - 20  # parted far back
    assert not holds(first) and len(demo_backend.prompt_cache.entries) == 2  # the side request's, and this one's


def test_every_rank_of_a_group_supersedes_alike_from_what_rank_0_sends(demo_backend, monkeypatch):
    """Every rank of a group must start a row from the same cached prefix (group/lockstep.py), and a follower
    prepares no prompt: its row hands its cache what rank 0's message says of the request (``PromptFacts``, sent
    as JSON). So both ranks supersede alike: after a turn with reasoning off, the next turn's entry stands in for
    the first's (its prompt parted only in the template's transient opening), on both; a regeneration of the
    first turn then reuses as much on each, and they hold the same entries."""
    import json

    from tinytitan.engine.cache.entries import PromptFacts

    ranks = {"rank 0": PromptCache(1 << 30), "follower": PromptCache(1 << 30)}
    monkeypatch.setattr(demo_backend, "prompt_cache", ranks["rank 0"])  # rank 0 prepares (and remembers) the prompts
    encode = demo_backend.tokenizer.encode
    turn = [("system", "You write code."), ("user", "Write a function that adds two numbers.")]
    for msgs, answer in ((turn, "def add(a, b): return a + b"),
                         (turn + [("assistant", "def add(a, b): return a + b"), ("user", "Now subtract.")], "def sub"),
                         (turn, "def add(x, y): return x + y")):  # the first turn regenerated
        prepared = demo_backend.prepare(_req(msgs))
        tokens = prepared.tokens
        reused = {name: cache.fetch(tokens)[1] for name, cache in ranks.items()}
        assert reused["rank 0"] == reused["follower"], reused
        sent = PromptFacts.from_json(json.loads(json.dumps(prepared.cache_facts.as_json())))
        assert sent == prepared.cache_facts and sent.fingerprint is not None
        answered = tokens + encode(answer + "<|im_end|>", add_special_tokens=False)
        ranks["rank 0"].store(answered, None, facts=prepared.cache_facts)
        ranks["follower"].store(answered, None, facts=sent)
        if len(msgs) == 4:
            assert len(ranks["rank 0"].entries) == 1  # the first turn's entry gave way
    held = [sorted(e.tokens.tobytes() for e in cache.entries.values()) for cache in ranks.values()]
    assert held[0] == held[1] and len(held[0]) == 2

    # reasoning on, a later turn whose client left while its prompt was read: an entry shorter than its prompt.
    # Rank 0 remembers the first turn's prompt, which the cut one starts with, a follower no prompt: the entry
    # knows nothing of its request on either rank
    for cache in ranks.values():
        cache.clear()
    first = demo_backend.prepare(_req(turn, reasoning=True))
    answered = first.tokens + encode("def add(a, b): return a + b<|im_end|>", add_special_tokens=False)
    later = demo_backend.prepare(_req(turn + [("assistant", "def add(a, b): return a + b"), ("user", "Now x.")],
                                      reasoning=True))
    assert later.tokens[:len(answered)] == answered
    for cache in ranks.values():
        cache.store(answered, None, facts=first.cache_facts)
        cache.store(later.tokens[:-3], None, facts=later.cache_facts)
    held = [[(e.tokens.tobytes(), e.prompt_length, e.lasting_prompt, e.fingerprint)
             for e in cache.entries.values()] for cache in ranks.values()]
    assert held[0] == held[1] and len(held[0]) == 1 and held[0][0][1] is None


def test_the_part_of_a_prompt_a_later_turn_repeats_leaves_out_the_templates_transient_opening(demo_backend):
    decode = demo_backend.tokenizer.decode
    off, on = (demo_backend.transient_opening(demo_backend.template_kwargs(_req([], reasoning=level)))
               for level in (False, True))
    assert decode(list(off)) == "<think>\n\n</think>\n\n" and on is None
    req = _req([("user", "hello")])
    prepared = demo_backend.prepare(req)
    lasting = demo_backend.lasting_prompt(prepared.tokens, req)
    assert lasting == len(prepared.tokens) - len(off)
    assert decode(prepared.tokens[:lasting]).endswith("hello<|im_end|>\n<|im_start|>assistant\n")
    assert demo_backend.lasting_prompt(prepared.tokens[:-1], req) is None  # ids that do not end with it
    assert demo_backend.lasting_prompt(prepared.tokens, _req([("user", "hello")], reasoning=True)) is None
    raw = ChatRequest(model="tinytitan-demo", messages=(), prompt="hello")
    assert demo_backend.lasting_prompt(demo_backend.prepare(raw).tokens, raw) is None  # no template: not known


async def test_edit_far_back_costs_only_the_tail(demo_backend):
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    turns = [("system", "sys " * 50), ("user", "first question " * 20), ("assistant", "first answer " * 20),
             ("user", "second question"), ]
    p1, _, _, _ = await _run(engine, _req(turns, max_tokens=2))
    edited = list(turns)
    edited[2] = ("assistant", "first answer " * 19)  # the client rewrote an old turn
    p2 = await engine.prepare(_req(edited, max_tokens=2))
    shared = common_prefix(np.array(p1.tokens), np.array(p2.tokens))
    _, cached, _, _ = await _run(engine, _req(edited, max_tokens=2))
    assert cached == shared and shared > len(p2.tokens) // 2


async def test_billing_header_does_not_defeat_the_cache(demo_backend):
    """Claude Code's first system block changes every session; the Anthropic table drops it before
    rendering, so two sessions share the whole prompt prefix."""
    import json

    from tinytitan.engine.engine import Engine
    from tinytitan.protocols.anthropic_messages import AnthropicMessages

    proto = AnthropicMessages()
    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)

    def request(cch):
        body = {"model": demo_backend.model_id, "max_tokens": 2, "temperature": 0,
                "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.3; cch={cch};"},
                           {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": "hello"}]}
        return proto.chat_request(proto.validate(json.dumps(body).encode()))

    p1, _, _, _ = await _run(engine, request("aaaa1111"))
    assert "billing" not in p1.prompt_text and "You are Claude Code." in p1.prompt_text
    p2, cached, _, _ = await _run(engine, request("bbbb2222"))
    assert p1.tokens == p2.tokens and cached == len(p2.tokens) - 1


def test_byte_budget_evicts(demo_backend):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    kv = make_prompt_cache(demo_backend.ensure_loaded())
    demo_backend.ensure_loaded()(mx.array([[1, 2, 3, 4]]), cache=kv)
    size = sum(c.nbytes for c in kv)
    c = PromptCache(max_bytes=int(size * 1.5))
    c.store([1, 2, 3, 4], kv)
    kv2 = make_prompt_cache(demo_backend.ensure_loaded())
    demo_backend.ensure_loaded()(mx.array([[5, 6, 7, 8]]), cache=kv2)
    c.store([5, 6, 7, 8], kv2)
    assert len(c.entries) == 1 and c.nbytes <= c.max_bytes
    assert c.fetch([5, 6, 7, 8, 9])[1] == 4


async def test_cached_tokens_on_the_wire(serve, demo_backend):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    body = {"model": demo_backend.model_id, "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "user", "content": "cache me " * 30}]}
    async with httpx.AsyncClient(timeout=60) as c:
        r1 = (await c.post(s.url("/v1/chat/completions"), json=body)).json()
        r2 = (await c.post(s.url("/v1/chat/completions"), json=body)).json()
    assert r1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == r2["usage"]["prompt_tokens"] - 1


async def test_a_request_cancelled_while_its_prompt_is_read_stops_after_that_chunk(demo_backend, monkeypatch):
    """Claude Code's Esc during a long prefill: the decode stops at the next prefill chunk (not after the whole
    prompt), and what was read is cached for the retry."""
    from tinytitan.engine.decode import decoder, scheduler
    from tinytitan.engine.decode.token_events import DecodeLoop
    from tinytitan.engine.engine import Engine

    # chunks of 256 tokens, not mlx-lm's 2048: the same path over a prompt an eighth as long
    monkeypatch.setattr(scheduler, "PREFILL_STEP", 256)
    monkeypatch.setattr(decoder, "PREFILL_STEP", 256)
    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    long = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(75))
    prepared = await engine.prepare(_req([("user", long)], max_tokens=4))
    assert len(prepared.tokens) > 3 * 256  # several prefill chunks
    await engine.model_thread.run_sync(demo_backend.ensure_loaded)
    events, asked = [], []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 1  # the client leaves once the first chunk is read

    loop = DecodeLoop(demo_backend.parser(prepared), (), events.append)
    await engine.model_thread.run_sync(demo_backend.decode, prepared, loop, should_stop)
    assert [type(ev).__name__ for ev in events] == ["Started"]  # no token, no Finished: it was cancelled
    [entry] = demo_backend.prompt_cache.entries.values()
    assert len(entry.tokens) == 256  # read up to the cancel, and kept
    p2, cached, fin, _ = await _run(engine, _req([("user", long)], max_tokens=4))
    assert cached == 256 and fin.usage.prompt_tokens == len(p2.tokens)


@pytest.mark.parametrize("max_batch, decoding", [(1, "sampler_for"), (4, "sampler_for")])
async def test_all_model_work_runs_on_one_thread(demo_backend, monkeypatch, max_batch, decoding):
    """MLX leaves threads behind on every thread that ran it, and each thread's malloc arena keeps memory:
    loading, decoding (one at a time, or a batch member joining) and unloading all happen on the process's
    one model thread."""
    import threading

    from tinytitan.engine.engine import Engine

    seen = []
    for name in ("ensure_loaded", decoding, "unload"):
        real = getattr(demo_backend, name)

        def spy(*args, _real=real, _name=name, **kw):
            seen.append((_name, threading.get_ident()))
            return _real(*args, **kw)

        monkeypatch.setattr(demo_backend, name, spy)
    engine = Engine(demo_backend, max_batch=max_batch)
    before = threading.active_count()
    for i in range(3):
        await _run(engine, _req([("user", f"question {i}")], max_tokens=3))
        await engine.unload()
    assert {name for name, _ in seen} == {"ensure_loaded", decoding, "unload"}
    assert {ident for _, ident in seen} == {engine.model_thread.ident} != {threading.get_ident()}
    assert threading.active_count() <= before + 1  # the model thread, if this was its first job

"""A checkpoint at the end of a prompt (engine/cache/checkpoint.py): a KV cache that cannot be trimmed back (a
sliding window past its size) is kept where the prompt was read, besides the answer's entry, so a next turn whose
copy of the answer differs reuses the whole prompt; a cache that stays trimmable gets none. The prompt cache's
rules for such caches: the longest entry it can reuse wins, and an entry the new one cannot be trimmed back to
is not superseded. (The vision model's case, an image in the prompt: tests/test_vision.py.)"""

from __future__ import annotations

import pytest

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.cache.checkpoint import keep, wanted
from tinytitan.engine.cache.entries import kv_bytes, kv_trimmable
from tinytitan.engine.cache.memory import PromptCache

WINDOW = 64  # the windowed text model's cache size (mlx-lm's max_kv_size: a RotatingKVCache in every layer)


def rotating(tokens: int, max_size: int = 8, layers: int = 2) -> list:
    import mlx.core as mx
    from mlx_lm.models.cache import RotatingKVCache

    kv = [RotatingKVCache(max_size) for _ in range(layers)]
    for c in kv:
        x = mx.random.normal((1, 2, tokens, 4))
        c.update_and_fetch(x, x)
    mx.eval([c.state for c in kv])
    return kv


def test_when_a_checkpoint_is_wanted():
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    plain = [KVCache()]
    plain[0].update_and_fetch(mx.zeros((1, 2, 30, 4)), mx.zeros((1, 2, 30, 4)))
    assert not wanted(plain, 10_000)  # a plain KV cache is always trimmed back instead
    assert not wanted(rotating(5), 2)  # its window cannot fill before the row ends
    assert wanted(rotating(5), 3)  # its answer could fill the window
    assert wanted(rotating(9), 0)  # past its window already: it cannot be trimmed back
    c = PromptCache(1 << 30)
    assert not keep(c, list(range(30)), plain, (), 100) and not c.entries


def test_a_recurrent_state_is_checkpointed_under_the_tokens_it_holds():
    """A recurrent state (mlx-lm's ArraysCache) keeps no offset and cannot be trimmed: its checkpoint is a copy of
    its state, kept under the prompt tokens it has read, and the row's later steps do not change it."""
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache

    state = ArraysCache(2)
    state[0], state[1] = mx.ones((1, 4)), mx.zeros((1, 3))
    c = PromptCache(1 << 30)
    assert keep(c, list(range(12)), [state], (), more=1)
    state[0] = state[0] * 5  # the row steps on
    kv, n = c.fetch(list(range(12)) + [40, 41])
    assert n == 12 and kv[0] is not state and kv[0][0].tolist() == [[1.0] * 4] and kv[0][1].shape == (1, 3)


def test_a_checkpoint_outlives_the_answer_and_serves_a_rewritten_one():
    c = PromptCache(1 << 30)
    prompt = list(range(1, 21))
    checkpoint = rotating(19)
    assert keep(c, prompt[:-1], checkpoint, (), more=8)  # the prompt read but for its last token
    answer = rotating(24)
    assert not kv_trimmable(answer)
    c.store(prompt + [50, 51, 52, 53], answer)  # the row's end: prompt and answer (all but its last token)
    assert sorted(len(e.tokens) for e in c.entries.values()) == [19, 24]  # not superseded: it cannot stand in
    assert c.nbytes == kv_bytes(answer) + kv_bytes(checkpoint)  # both count against the budget
    # the answer came back as other tokens: the answer's entry shares more, but only the checkpoint can serve
    kv, n = c.fetch(prompt + [50, 99, 98, 7])
    assert n == 19 and kv[0].offset == 19
    assert [len(e.tokens) for e in c.entries.values()] == [24]  # taken out: the row extends it in place
    c.store(prompt[:-1], kv)
    # the answer came back as it was: its own entry, whole
    kv, n = c.fetch(prompt + [50, 51, 52, 53, 60])
    assert n == 24 and kv is answer


def test_a_checkpoint_counts_against_the_byte_budget_like_any_entry():
    first, second = rotating(19), rotating(24)
    c = PromptCache(2 * kv_bytes(first))
    c.store([7, 7, 7], rotating(3))  # another conversation's
    assert keep(c, list(range(19)), first, (), more=8)
    assert sorted(len(e.tokens) for e in c.entries.values()) == [3, 19]
    c.store(list(range(24)), second)  # the budget evicts the least recently used: the other, then the checkpoint
    assert [len(e.tokens) for e in c.entries.values()] == [24] and c.nbytes <= c.max_bytes
    # one that would not fit beside its answer's entry is not kept: it would only evict others to be evicted
    c = PromptCache(2 * kv_bytes(first) - 1)
    c.store([7, 7, 7], rotating(3))
    assert not keep(c, list(range(19)), rotating(19), (), more=8)
    assert [len(e.tokens) for e in c.entries.values()] == [3]


def test_an_answer_that_can_be_trimmed_back_supersedes_the_checkpoint():
    c = PromptCache(1 << 30)
    assert keep(c, list(range(19)), rotating(19, max_size=WINDOW), (), more=WINDOW)  # it could fill its window
    answer = rotating(30, max_size=WINDOW)  # it did not: the answer's entry is trimmed back instead
    c.store(list(range(30)), answer)
    assert [len(e.tokens) for e in c.entries.values()] == [30]
    kv, n = c.fetch(list(range(19)) + [77, 78])
    assert n == 19 and kv[0].offset == 19


@pytest.fixture(scope="module")
def windowed():
    """The demo text model with mlx-lm's rotating KV cache (``max_kv_size``) in every layer."""
    from mlx_lm.models.cache import make_prompt_cache

    from tinytitan.demo_model import demo_model_id, ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    class Windowed(MLXBackend):
        def new_cache(self, model) -> list:
            return make_prompt_cache(model, max_kv_size=WINDOW)

    return Windowed(ensure_demo_model(), demo_model_id())


def _req(msgs, **kw):
    # reasoning on: the demo template's generation prompt is then what the next turn renders before the answer
    # (with it off, the prompt ends in an empty think block the next turn's history drops)
    return ChatRequest(model="tinytitan-demo", messages=tuple(Message(r, c) for r, c in msgs), temperature=0,
                       reasoning=True, max_tokens=8, **kw)


async def _run(engine, req):
    async with engine.session(req) as events:
        prepared, events = events.prepared, [ev async for ev in events]
    text = "".join(getattr(ev, "text", "") for ev in events if type(ev).__name__ in ("TextDelta", "ReasoningDelta"))
    return prepared, events[0].cached_tokens, text


async def test_a_sliding_window_text_model_reuses_its_prompt_after_a_rewritten_answer(windowed):
    from tinytitan.engine.engine import Engine

    windowed.prompt_cache.clear()
    engine = Engine(windowed)
    turn = [("system", "You write code. " * 40), ("user", "Write a function that sorts a list.")]
    p1, cached, text1 = await _run(engine, _req(turn))
    assert cached == 0 and len(p1.tokens) > 2 * WINDOW
    # the same prompt again (a retry): all of it but its last token comes from the checkpoint
    _, cached, again = await _run(engine, _req(turn))
    assert cached == len(p1.tokens) - 1 and again == text1
    # the next turn sends back another answer than was generated: the prompt is still reused whole
    follow = _req([*turn, ("assistant", "Here is a different answer."), ("user", "Now test it.")])
    p2, cached, text2 = await _run(engine, follow)
    assert p2.tokens[:len(p1.tokens)] == p1.tokens and cached == len(p1.tokens) - 1
    windowed.prompt_cache.clear()
    _, cold, text3 = await _run(engine, follow)
    assert cold == 0 and text3 == text2  # the same tokens as reading it all


async def test_a_trimmable_cache_takes_no_checkpoint(demo_backend):
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    p1, _, _ = await _run(Engine(demo_backend), _req([("user", "Write a function that sorts a list. " * 10)]))
    entries = list(demo_backend.prompt_cache.entries.values())
    assert len(entries) == 1 and len(entries[0].tokens) > len(p1.tokens)  # the answer's entry alone


def test_a_checkpoint_goes_to_disk_and_is_read_back_after_a_restart(demo_backend, tmp_path):
    """On disk too the answer's file does not supersede the checkpoint's (it cannot be trimmed back to it, as its
    metadata says), and a restarted server reads back the file that can serve the prompt, not the longest."""
    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.disk_files import read_metadata

    def cache():
        c = PromptCache(1 << 30)
        c.disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")), lambda: "rotating", 1 << 30)
        return c

    prompt = list(range(1, 101))
    c = cache()
    assert keep(c, prompt[:-1], rotating(99), (), more=8)
    c.store(prompt + [500, 501, 502, 503], rotating(104))
    assert c.disk.flush()
    metas = sorted((read_metadata(f) for f in tmp_path.glob("*.safetensors")), key=lambda m: len(m["tinytitan_tokens"]))
    assert [m["tinytitan_trimmable"] for m in metas] == ["0", "0"]
    restarted = cache()
    kv, n = restarted.fetch(prompt + [500, 777, 778, 9])
    assert n == 99 and kv[0].offset == 99 and restarted.disk.reads == 1


def counting_snapshots(monkeypatch) -> list:
    """Each snapshot a checkpoint takes (a copy of the whole KV cache), as it is taken."""
    from tinytitan.engine.cache import checkpoint

    taken = []

    def counted(kv):
        taken.append(kv)
        return snapshot(kv)

    snapshot = checkpoint.snapshot
    monkeypatch.setattr(checkpoint, "snapshot", counted)
    return taken


def test_a_prompt_whose_checkpoint_is_held_already_takes_no_second_snapshot(demo_backend, tmp_path, monkeypatch):
    """A request's other choices reach the end of the same prompt from the first's checkpoint: each would copy the
    whole KV cache and write it to disk again, for an entry that only replaces the one there. Another prompt, or
    the same one once its entry was taken out (a retry starts from it), still gets its own."""
    from tinytitan.engine.cache.disk import PromptDisk

    taken = counting_snapshots(monkeypatch)
    c = PromptCache(1 << 30)
    c.disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")), lambda: "rotating", 1 << 30)
    prompt = list(range(1, 101))
    for _ in range(3):
        assert keep(c, prompt, rotating(100), (), more=8, shared=True)
    assert len(taken) == 1 and [len(e.tokens) for e in c.entries.values()] == [100]
    assert c.disk.flush() and c.disk.stats()["writes"] == 1
    assert keep(c, prompt[:-1], rotating(99), (), more=8) and len(taken) == 2  # another prompt: its own
    kv, n = c.fetch(prompt + [7])  # a retry of the prompt takes its entry out, and keeps it again after
    assert n == 100 and not c.holds(prompt)
    assert keep(c, prompt, kv, (), more=8) and len(taken) == 3 and c.holds(prompt)


async def test_a_requests_choices_make_one_checkpoint_of_their_prompt(windowed, monkeypatch):
    """Three choices of one prompt (a request's rows, run here one after another): the first reads it and keeps
    its checkpoint; the others start from it and take no snapshot of their own."""
    from tinytitan.engine.engine import Engine

    taken = counting_snapshots(monkeypatch)
    windowed.prompt_cache.clear()
    engine = Engine(windowed)
    req = _req([("system", "You write code. " * 40), ("user", "Three answers, please.")], shared_prompt=True,
               response_id="cmpl-three-choices")
    started = []
    for seed in range(3):
        p, cached, _ = await _run(engine, req.with_(seed=seed, temperature=1.0))
        started.append((len(p.tokens), cached))
    length = started[0][0]
    assert length > 2 * WINDOW and started == [(length, 0), (length, length - 1), (length, length - 1)]
    assert len(taken) == 1
    engine.end_unit(engine.unit(1, req.response_id))
    windowed.prompt_cache.clear()


async def test_a_later_choice_after_the_first_ended_takes_no_snapshot_where_its_answer_holds_the_prompt(
        demo_backend, monkeypatch):
    """A cache that can be trimmed: the first choice keeps its shared prompt's checkpoint, then ends before the
    second's first step, and its answer's entry (the prompt and more, trimmable) supersedes the checkpoint. The
    second starts from that entry trimmed back and reads the last token alone; it takes no second snapshot of the
    prompt (a copy of the whole KV cache, and a disk write) for an entry the answer's already stands in for."""
    from tinytitan.engine.engine import Engine

    taken = counting_snapshots(monkeypatch)
    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    req = _req([("user", "Two answers, one after the other. " * 6)], shared_prompt=True,
               response_id="cmpl-a-later-choice")
    try:
        p, cached, _ = await _run(engine, req.with_(seed=1, temperature=1.0))
        assert cached == 0 and len(taken) == 1  # its checkpoint, then its answer's entry
        entries = list(demo_backend.prompt_cache.entries.values())
        assert len(entries) == 1 and len(entries[0].tokens) >= len(p.tokens)  # the answer's, alone
        second, cached, _ = await _run(engine, req.with_(seed=2, temperature=1.0))
        assert second.tokens == p.tokens and cached == len(p.tokens) - 1  # its last token alone read
        assert len(taken) == 1 and len(demo_backend.prompt_cache.entries) == 1  # no second checkpoint
    finally:
        engine.end_unit(engine.unit(1, req.response_id))
        demo_backend.prompt_cache.clear()


def plain(tokens: int, layers: int = 2) -> list:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    kv = [KVCache() for _ in range(layers)]
    for c in kv:
        x = mx.random.normal((1, 2, tokens, 4))
        c.update_and_fetch(x, x)
    mx.eval([c.state for c in kv])
    return kv


def test_only_a_longer_entry_that_stays_trimmable_stands_in_for_a_checkpoint(monkeypatch):
    """A longer entry serves a prompt's checkpoint only where it can be trimmed back to it now and as it grows: an
    answer's entry past its window cannot, nor can one with a window it has not filled yet (its next turn may), so
    the checkpoint is still taken beside them; a plain KV cache's stands in."""
    taken = counting_snapshots(monkeypatch)
    prompt = list(range(1, 21))
    c = PromptCache(1 << 30)
    c.store(prompt + [50, 51, 52, 53], rotating(24))  # past its window of 8: reused only whole
    assert not c.holds(prompt[:-1])
    assert keep(c, prompt[:-1], rotating(19), (), more=8, shared=True) and len(taken) == 1
    c = PromptCache(1 << 30)
    c.store(prompt + [50, 51, 52, 53], rotating(24, max_size=WINDOW))  # within its window, for now
    assert not c.holds(prompt[:-1])
    assert keep(c, prompt[:-1], rotating(19, max_size=WINDOW), (), more=8, shared=True) and len(taken) == 2
    c = PromptCache(1 << 30)
    c.store(prompt + [50, 51, 52, 53], plain(24))  # trimmed back, however long it grows
    assert c.holds(prompt[:-1]) and not c.holds(prompt[:-1] + [77])
    assert keep(c, prompt[:-1], plain(19), (), more=8, shared=True) and len(taken) == 2
    assert [len(e.tokens) for e in c.entries.values()] == [24]


def test_a_longer_entry_within_its_window_taken_out_by_its_next_turn_leaves_the_checkpoint(monkeypatch):
    """An answer's entry within its window holds the prompt for now, but its own conversation's next turn takes it
    out whole and goes past the window: the checkpoint taken beside it still serves this prompt's next turn, whose
    copy of the answer (past the window too) came back as other tokens."""
    counting_snapshots(monkeypatch)
    prompt = list(range(1, 21))
    other = prompt + [50, 51, 52, 53]  # another choice's answer, or an earlier one to the same prompt
    c = PromptCache(1 << 30)
    c.store(other, rotating(24, max_size=WINDOW))
    assert keep(c, prompt[:-1], rotating(19, max_size=WINDOW), (), more=WINDOW)  # its answer could fill the window
    kv, n = c.fetch(other + [60, 61])  # the other's next turn: its entry, whole, taken out
    assert n == 24
    c.store(other + list(range(100, 100 + WINDOW)), rotating(24 + WINDOW, max_size=WINDOW))  # ... past the window
    answer = prompt + list(range(200, 200 + WINDOW))
    c.store(answer, rotating(len(answer), max_size=WINDOW))  # this prompt's answer, past the window
    kv, n = c.fetch(prompt + [200, 999, 7])  # its next turn, the answer come back as other tokens
    assert n == len(prompt) - 1 and kv[0].offset == n

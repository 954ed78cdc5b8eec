"""Prompt prefixes on disk: written off the request path and atomically, read back after a restart with the same
output, bounded (least recently used first), and a file of another model, version or layout never misread."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.cache.disk import PromptDisk
from tinytitan.engine.cache.disk_files import FORMAT, layout_of, read_metadata
from prompt_cache_helpers import disk_cache, prompt_disk, spelled_out_ids, demo_request


def _kv(backend, tokens):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    model = backend.ensure_loaded()
    kv = make_prompt_cache(model)
    logits = model(mx.array(tokens)[None], cache=kv)
    mx.eval(logits)
    return kv, logits


def _next_logits(backend, kv, token):
    import mlx.core as mx

    out = backend.ensure_loaded()(mx.array([[token]]), cache=kv)
    mx.eval(out)
    return np.array(out[0, -1])


def test_a_prefix_written_is_read_back_after_a_restart_with_the_same_logits(demo_backend, tmp_path):
    tokens = list(range(100, 300))
    kv, _ = _kv(demo_backend, tokens)
    c = disk_cache(demo_backend, tmp_path)
    c.store(tokens, kv)
    assert c.disk.flush()
    files = list(tmp_path.glob("*.safetensors"))
    assert len(files) == 1 and not list(tmp_path.glob(".*tmp*"))
    meta = read_metadata(files[0])
    assert meta["tinytitan_format"] == FORMAT and meta["tinytitan_weights"] == c.disk.digest

    expected = _next_logits(demo_backend, _kv(demo_backend, tokens)[0], 7)
    restarted = disk_cache(demo_backend, tmp_path)  # a new process: nothing in memory
    got, n = restarted.fetch(tokens + [7, 8])
    assert n == len(tokens) and restarted.disk.reads == 1
    np.testing.assert_allclose(_next_logits(demo_backend, got, 7), expected, rtol=1e-5, atol=1e-5)


def test_a_longer_prefix_supersedes_its_prefix_on_disk_and_the_budget_evicts_the_oldest(demo_backend, tmp_path):
    short = list(range(100, 200))
    c = disk_cache(demo_backend, tmp_path)
    c.store(short, _kv(demo_backend, short)[0])
    c.disk.flush()
    longer = short + list(range(500, 600))
    c.store(longer, _kv(demo_backend, longer)[0])
    c.disk.flush()
    files = list(tmp_path.glob("*.safetensors"))
    assert len(files) == 1 and len(c.disk.stats()["dir"]) > 0
    one = files[0].stat().st_size

    small = disk_cache(demo_backend, tmp_path, max_bytes=int(one * 1.5))
    other = list(range(1000, 1200))
    small.store(other, _kv(demo_backend, other)[0])
    small.disk.flush()
    left = list(tmp_path.glob("*.safetensors"))
    assert len(left) == 1 and left[0] != files[0]  # the older file went


def test_files_of_another_model_layout_or_version_are_never_read(demo_backend, tmp_path, caplog):
    tokens = list(range(100, 300))
    kv, _ = _kv(demo_backend, tokens)
    c = disk_cache(demo_backend, tmp_path)
    c.store(tokens, kv)
    c.disk.flush()
    [f] = tmp_path.glob("*.safetensors")

    other_layout = disk_cache(demo_backend, tmp_path, layout=lambda: json.dumps({"classes": ["RotatingKVCache"]}))
    with caplog.at_level(logging.WARNING, logger="tinytitan.cache"):
        assert other_layout.fetch(tokens + [1]) == (None, 0)
    assert "another cache layout" in caplog.text
    assert caplog.text.count("another cache layout") == 1  # one line a layout, however many files

    other_model = disk_cache(demo_backend, tmp_path)
    other_model.disk._digest = "0" * 64  # another model's weights
    assert other_model.fetch(tokens + [1]) == (None, 0)

    # another format version: ignored with a warning
    import mlx.core as mx

    arrays, meta = mx.load(str(f), return_metadata=True)
    meta["0.tinytitan_format"] = "tinytitan-prompt-cache/0"  # (save_prompt_cache flattens the metadata)
    old = tmp_path / ("0" * 40 + ".safetensors")  # (named as every version names its files)
    mx.save_safetensors(str(old), arrays, meta)
    f.unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tinytitan.cache"):
        assert disk_cache(demo_backend, tmp_path).fetch(tokens + [1]) == (None, 0)
    assert "another version" in caplog.text
    # the format before this one (which named the weights by another digest) can never be read: removed
    meta["0.tinytitan_format"] = "tinytitan-prompt-cache/1"
    v1 = tmp_path / ("1" * 40 + ".safetensors")
    mx.save_safetensors(str(v1), arrays, meta)
    assert disk_cache(demo_backend, tmp_path).fetch(tokens + [1]) == (None, 0)
    assert not v1.exists() and old.exists()


def test_a_damaged_file_is_ignored_with_a_warning(demo_backend, tmp_path, caplog):
    tokens = list(range(100, 300))
    c = disk_cache(demo_backend, tmp_path)
    c.store(tokens, _kv(demo_backend, tokens)[0])
    c.disk.flush()
    [f] = tmp_path.glob("*.safetensors")
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])  # the header survives, the tensors do not
    with caplog.at_level(logging.WARNING, logger="tinytitan.cache"):
        assert disk_cache(demo_backend, tmp_path).fetch(tokens + [1]) == (None, 0)
    assert "could not be read back" in caplog.text


def test_a_damaged_file_is_written_anew_when_its_prefix_comes_again(demo_backend, tmp_path):
    tokens = list(range(100, 300))
    kv = _kv(demo_backend, tokens)[0]
    c = disk_cache(demo_backend, tmp_path)
    c.store(tokens, kv)
    c.disk.flush()
    [f] = tmp_path.glob("*.safetensors")
    whole = f.read_bytes()
    f.write_bytes(whole[: len(whole) // 2])
    restarted = prompt_disk(demo_backend, tmp_path)
    assert restarted.load(restarted.best(np.array(tokens + [1]))[0]) is None  # damaged: dropped from the index
    restarted.put(np.array(tokens), kv, ())
    assert restarted.flush() and f.stat().st_size == len(whole)
    assert disk_cache(demo_backend, tmp_path).fetch(tokens + [1])[1] == len(tokens)


def test_another_conversation_with_the_same_opening_keeps_its_queued_write(demo_backend, tmp_path, monkeypatch):
    """Two conversations that open with the same system prompt (sub-agents), queued while the writer is busy:
    both are written; a conversation's own newer snapshot replaces its waiting one."""
    import threading

    system = list(range(100, 180))
    a, b = system + [1, 2, 3], system + [5, 6, 7, 8]
    disk = prompt_disk(demo_backend, tmp_path)
    disk.layout  # (on this thread, as the model thread would)
    busy, real_scan = threading.Event(), PromptDisk._scan
    monkeypatch.setattr(PromptDisk, "_scan", lambda self: (busy.wait(30), real_scan(self))[1])
    for tokens in (a, b, a + [9, 9]):
        disk.put(np.array(tokens), _kv(demo_backend, tokens)[0], ())
    assert disk.waiting == 2  # a's first snapshot gave way to its next; b's stays
    busy.set()
    assert disk.flush()
    assert sorted(len(f.tokens) for f in disk._index.values()) == [len(b), len(a) + 2]


def test_a_write_in_progress_is_no_cache_file(demo_backend, tmp_path):
    """A file under a write's temporary name (a dot-name, also one another process is writing) is never read
    back and never counted or evicted."""
    tokens = list(range(100, 300))
    c = disk_cache(demo_backend, tmp_path)
    c.store(tokens, _kv(demo_backend, tokens)[0])
    c.disk.flush()
    [f] = tmp_path.glob("*.safetensors")
    tmp = tmp_path / f".{f.stem}.999999.tmp.safetensors"
    f.rename(tmp)
    restarted = prompt_disk(demo_backend, tmp_path, max_bytes=1)
    assert restarted.best(np.array(tokens + [1]))[1] == 0 and restarted.stats()["entries"] == 0
    restarted.put(np.array(tokens[:100]), _kv(demo_backend, tokens[:100])[0], ())  # a write: over the budget
    assert restarted.flush() and tmp.exists()


def test_a_directory_that_cannot_be_used_keeps_nothing_queued(demo_backend, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the directory should be")
    disk = prompt_disk(demo_backend, blocked)
    for n in (100, 120, 140):
        tokens = list(range(100, 100 + n))
        disk.put(np.array(tokens), _kv(demo_backend, tokens)[0], ())
        assert disk.flush(timeout=10)
    assert disk.stats()["pending"] == 0 and disk.stats()["entries"] == 0


async def test_a_restarted_engine_reads_the_conversation_back_and_answers_the_same(demo_backend, tmp_path):
    from tinytitan.engine.engine import Engine

    async def run(req):
        async with Engine(demo_backend).session(req) as events:
            evs = [ev async for ev in events]
        return evs[0].cached_tokens, "".join(getattr(e, "text", "") for e in evs[1:-1])

    saved = demo_backend.prompt_cache
    try:
        demo_backend.prompt_cache = disk_cache(demo_backend, tmp_path)
        turn = [("system", "You are terse. " * 20), ("user", "Explain the cache. " * 10)]
        cached, answer = await run(demo_request(turn))
        assert cached == 0
        assert demo_backend.prompt_cache.disk.flush()
        follow = demo_request(turn + [("assistant", answer), ("user", "And then?")])
        demo_backend.prompt_cache = PromptCache(1 << 30)  # no disk: what a cold start reads
        cold_cached, cold_answer = await run(follow)
        demo_backend.prompt_cache = disk_cache(demo_backend, tmp_path)  # a restart: memory empty, disk kept
        warm_cached, warm_answer = await run(follow)
        assert cold_cached == 0 and warm_cached > 200 and warm_answer == cold_answer
        assert demo_backend.prompt_cache.disk.reads == 1
    finally:
        demo_backend.prompt_cache = saved


@pytest.mark.parametrize("value", ["off"])
def test_the_disk_can_be_turned_off(value, tmp_path):
    from tinytitan.model_setup import attach_prompt_disk

    class Args:
        prompt_cache_dir, prompt_cache_disk_mib, script = value, 100, None

    class B:
        prompt_cache = PromptCache(1)

    attach_prompt_disk([B()], Args())
    assert B.prompt_cache.disk is None


def test_kv_bits_is_refused_by_name_where_the_heads_are_too_narrow():
    """The demo model's heads are 16 wide: no quantization group fits, and --kv-bits says so."""
    from tinytitan.demo_model import demo_model_id, ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    demo = MLXBackend(ensure_demo_model(), demo_model_id())
    demo.kv_bits = 8
    with pytest.raises(ValueError, match="--kv-bits 8: the heads of .* are 16 wide"):
        demo.check_kv_bits()


def test_kv_bits_cache_round_trip(demo_backend, tmp_path, monkeypatch):
    """The quantized cache on a stand-in model with 32-wide heads: it is QuantizedKVCache, smaller than the plain
    one, and written to disk and read back under a layout of its own."""
    import mlx.core as mx
    from mlx_lm.models import qwen3
    from mlx_lm.models.cache import QuantizedKVCache

    args = qwen3.ModelArgs(model_type="qwen3", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                           num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-6, vocab_size=300,
                           max_position_embeddings=512, rope_theta=10000.0, head_dim=32, tie_word_embeddings=True)
    model = qwen3.Model(args)
    mx.eval(model.parameters())
    monkeypatch.setattr(demo_backend, "model", model)
    monkeypatch.setattr(demo_backend, "kv_bits", 8)
    demo_backend.check_kv_bits()
    kv = demo_backend.new_cache(model)
    assert all(isinstance(c, QuantizedKVCache) and c.bits == 8 and c.group_size == 32 for c in kv)
    tokens = list(range(10, 200))
    model(mx.array(tokens)[None], cache=kv)
    plain = demo_backend.__class__.new_cache.__get__(type("P", (), {"kv_bits": None})())(model)
    model(mx.array(tokens)[None], cache=plain)
    assert sum(c.nbytes for c in kv) < 0.6 * sum(c.nbytes for c in plain)
    c = PromptCache(1 << 30)
    c.disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")), lambda: layout_of(model, 8), 1 << 30)
    c.store(tokens, kv)
    assert c.disk.flush()
    again = PromptCache(1 << 30)
    again.disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")), lambda: layout_of(model, 8), 1 << 30)
    got, n = again.fetch(tokens + [5])
    assert n == len(tokens) and isinstance(got[0], QuantizedKVCache)
    plain_layout = PromptCache(1 << 30)
    plain_layout.disk = PromptDisk(tmp_path, sorted(demo_backend.path.glob("*.safetensors")),
                                   lambda: layout_of(model, None), 1 << 30)
    assert plain_layout.fetch(tokens + [5]) == (None, 0)  # another layout: never read into a plain cache


def _small_kv(n: int) -> list:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 1, n, 8)), mx.zeros((1, 1, n, 8)))
    return [c]


def test_a_file_whose_turn_the_next_prompt_writes_otherwise_gives_way_where_only_a_transient_opening_parts(tmp_path):
    """As in memory: where the part of a file's prompt a later turn repeats is known (``tinytitan_lasting_prompt``),
    the next turn's file supersedes it though it parts before the answer (in an opening the template writes only
    for the turn it generates), after a restart too; a sub-agent's file that parts before that point stays."""
    import base64

    from tinytitan.engine.prompt.splice import Span

    opening = [7, 8, 9]

    def put(disk, turn: list[int], answer: list[int]) -> None:
        ids = turn + opening + answer
        disk.put(np.array(ids, dtype=np.int64), _small_kv(len(ids)),
                 (Span(len(turn) + len(opening), "p"), Span(len(answer), "a", True)), len(turn) + 1)
        assert disk.flush()

    system = list(range(1000, 1080))
    disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    put(disk, system + [1, 3], [77, 78])  # a sub-agent over the same system prompt
    turn = system + [1, 2]
    put(disk, turn, [90, 91])
    assert disk.stats()["entries"] == 2
    restarted = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    turn = turn + [7, 61, 62, 3, 3]  # answered (its header 7 kept, its opening 8, 9 not), then a new user turn
    put(restarted, turn, [92, 93])
    assert restarted.stats()["entries"] == 2
    assert restarted.best(np.array(turn + [4], dtype=np.int64))[1] == len(turn)
    held = sorted(len(base64.b64decode(read_metadata(p)["tinytitan_tokens"])) // 4 for p in tmp_path.glob("*.safetensors"))
    assert held == [len(system) + 7, len(turn) + 5]


def test_the_directory_is_counted_again_only_once_writes_may_pass_the_budget(tmp_path):
    """Counting every file after each write cost the writer thread ~10 ms of the GIL a generation at a few thousand
    files: the directory is counted when what was written since the last count may pass the budget, then brought
    back to EVICT_TO of it, least recently used first (a file another process left counts from then on)."""
    import os

    from tinytitan.engine.cache.disk import EVICT_TO

    def write(disk, first: int) -> None:
        disk.put(np.arange(first, first + 100, dtype=np.int64), _small_kv(100), ())
        assert disk.flush()

    sizing = PromptDisk(tmp_path / "sizing", [], lambda: "layout", 1 << 30)  # how big one such file is
    write(sizing, 0)
    size = next((tmp_path / "sizing").glob("*.safetensors")).stat().st_size

    disk = PromptDisk(tmp_path, [], lambda: "layout", int(size * 4.5))
    write(disk, 1000)  # counted: one file
    foreign = tmp_path / ("f" * 40 + ".safetensors")
    foreign.write_bytes(b"x" * size * 2)  # another process's file, the oldest of all
    os.utime(foreign, (1, 1))
    write(disk, 2000)
    write(disk, 3000)  # 3 files of this process's own count: within the budget, not counted again
    assert foreign.exists() and len(list(tmp_path.glob("*.safetensors"))) == 4
    write(disk, 4000)
    write(disk, 5000)  # 5 written since the count: past the budget, the directory counted (the foreign file too)
    left = sorted(tmp_path.glob("*.safetensors"))
    assert not foreign.exists()  # least recently used first
    assert sum(p.stat().st_size for p in left) <= size * 4.5 * EVICT_TO
    assert disk.stats()["entries"] == len(left)


def test_models_sharing_a_directory_keep_one_budget(tmp_path):
    """Each model has a PromptDisk of its own on the one directory: what any of them wrote since the last count
    counts, so together they never pass the budget (a model's own count alone let each write a budget more)."""
    def write(disk, first: int) -> None:
        disk.put(np.arange(first, first + 100, dtype=np.int64), _small_kv(100), ())
        assert disk.flush()

    sizing = PromptDisk(tmp_path / "sizing", [], lambda: "layout", 1 << 30)
    write(sizing, 0)
    size = next((tmp_path / "sizing").glob("*.safetensors")).stat().st_size
    shared = tmp_path / "shared"
    a = PromptDisk(shared, [], lambda: "layout a", size * 10)
    b = PromptDisk(shared, [], lambda: "layout b", size * 10)
    write(b, 0)
    for k in range(1, 10):
        write(a, 1000 * k)
    for k in range(1, 9):
        write(b, 1000 * k + 500)
        assert sum(p.stat().st_size for p in shared.glob("*.safetensors")) <= size * 10


def test_a_file_whose_answer_came_back_otherwise_gives_way_to_the_next_turns(tmp_path):
    """As in memory: a file says where its answer starts; the next turn's file, whose prompt starts with that file's
    prompt but parts from its answer, supersedes it (after a restart too). Another conversation's file stays."""
    import base64

    from tinytitan.engine.prompt.splice import Span

    def put(disk, prompt: list[int], answer: list[int]) -> None:
        ids = prompt + answer
        disk.put(np.array(ids, dtype=np.int64), _small_kv(len(ids)),
                 (Span(len(prompt), "p"), Span(len(answer), "a", True)))
        assert disk.flush()

    system = list(range(1000, 1080))
    disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    put(disk, system + [1, 2], [77, 78])  # another conversation over the same system prompt
    turn = system + [3, 4]
    put(disk, turn, [90, 91])
    turn = turn + [60, 61, 62]  # the answer sent back otherwise, then a new user turn
    put(disk, turn, [92, 93])
    assert disk.stats()["entries"] == 2 and len(list(tmp_path.glob("*.safetensors"))) == 2
    restarted = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    assert restarted.best(np.array(turn + [5, 6], dtype=np.int64))[1] == len(turn)  # its prompt, not its answer
    put(restarted, turn + [70, 71], [94])  # the same again, after the restart
    assert restarted.stats()["entries"] == 2

    def held(p) -> int:
        return len(base64.b64decode(read_metadata(p)["tinytitan_tokens"])) // 4

    assert sorted(held(p) for p in tmp_path.glob("*.safetensors")) == sorted([len(system) + 4, len(turn) + 3])


def test_a_config_change_with_the_same_weights_never_reads_the_old_kv(demo_backend, tmp_path):
    """The same weights under another configuration (a user who edits config.json, e.g. a RoPE base or YaRN
    for long context) compute other keys: a file the old configuration wrote is never read."""
    import shutil
    import time

    from tinytitan.engine.backends.mlx import MLXBackend

    tokens = list(range(100, 300))
    c = disk_cache(demo_backend, tmp_path / "cache")
    c.store(tokens, _kv(demo_backend, tokens)[0])
    assert c.disk.flush()
    other_dir = tmp_path / "model-longctx"
    shutil.copytree(demo_backend.path, other_dir)
    cfg = json.loads((other_dir / "config.json").read_text())
    cfg["rope_theta"] = 10000.0
    (other_dir / "config.json").write_text(json.dumps(cfg))
    other = MLXBackend(other_dir, "longctx")
    restarted = disk_cache(other, tmp_path / "cache")
    restarted.disk.start()
    deadline = time.monotonic() + 30  # (its writer thread reads the weights' digest and the directory first)
    while not restarted.disk.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert restarted.disk.digest == c.disk.digest  # the same weights
    assert restarted.fetch(tokens + [7, 8]) == (None, 0), "the new configuration read KV the old one computed"


def test_a_write_the_full_disk_refuses_leaves_no_partial_file(demo_backend, tmp_path, monkeypatch):
    """A full disk: the torn temporary file of the failed write is removed, not left holding the last free
    space (it counts in no budget, and only a start after 10 minutes would clean it)."""
    import errno

    import mlx_lm.models.cache as mlx_cache

    def fills_the_disk(path, cache, metadata):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mlx_cache, "save_prompt_cache", fills_the_disk)
    c = disk_cache(demo_backend, tmp_path)
    tokens = list(range(100, 300))
    c.store(tokens, _kv(demo_backend, tokens)[0])
    assert c.disk.flush()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_file_another_server_evicts_during_the_scan_leaves_the_disk_in_use(demo_backend, tmp_path, monkeypatch):
    """Two servers share a directory: one evicts a file between the other's reading its header and its size.
    The file is skipped; the directory stays in use."""
    import time

    import tinytitan.engine.cache.disk as disk_module

    c = disk_cache(demo_backend, tmp_path)
    for start in (100, 1000):
        tokens = list(range(start, start + 200))
        c.store(tokens, _kv(demo_backend, tokens)[0])
    assert c.disk.flush()
    first = sorted(tmp_path.glob("*.safetensors"))[0]
    read = disk_module.read_metadata

    def read_then_evicted(p):
        meta = read(p)
        if p == first:
            p.unlink()  # the other server's eviction, just now
        return meta

    monkeypatch.setattr(disk_module, "read_metadata", read_then_evicted)
    restarted = disk_cache(demo_backend, tmp_path)
    restarted.disk.start()
    deadline = time.monotonic() + 30  # (its writer thread reads the weights' digest and the directory first)
    while not restarted.disk.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert restarted.disk.stats()["entries"] == 1
    tokens = list(range(2000, 2200))
    restarted.store(tokens, _kv(demo_backend, tokens)[0])  # and it still writes
    assert restarted.disk.flush() and restarted.disk.stats()["entries"] == 2


def test_the_first_turn_after_a_restart_reuses_the_last_answers_own_ids(demo_backend, tmp_path):
    """The answer a client sends back is re-rendered text, which the tokenizer cuts otherwise than a weak model
    spelled it: the cache splices the model's own ids back in (prompt/splice.py). After a restart the files'
    answers are spliced as memory's are, so the first turn reuses the whole answer, as without the restart."""
    tok = demo_backend.tokenizer
    saved = demo_backend.prompt_cache
    try:
        demo_backend.prompt_cache = disk_cache(demo_backend, tmp_path)
        turn = [("system", "You write code. " * 8), ("user", "Write a function that parses a header.")]
        p1 = demo_backend.prepare(demo_request(turn))
        answer = "def parse(h):\n    return h.split(':', 1)"
        generated = spelled_out_ids(tok, answer) + tok.encode("<|im_end|>", add_special_tokens=False)
        ids = p1.tokens + generated
        demo_backend.prompt_cache.store(ids, _kv(demo_backend, ids)[0])
        assert demo_backend.prompt_cache.disk.flush()
        demo_backend.prompt_cache = disk_cache(demo_backend, tmp_path)  # a restart: memory empty, disk kept
        p2 = demo_backend.prepare(demo_request(turn + [("assistant", answer), ("user", "Now test it.")]))
        assert tok.decode(p2.tokens) == p2.prompt_text and p2.tokens[:len(ids)] == ids
        assert demo_backend.prompt_cache.fetch(p2.tokens)[1] == len(ids)  # the file read back, answer and all
    finally:
        demo_backend.prompt_cache = saved


def test_many_files_of_another_layout_are_said_in_one_line(demo_backend, tmp_path, caplog):
    c = disk_cache(demo_backend, tmp_path)
    for start in (100, 400, 700):
        tokens = list(range(start, start + 100))
        c.store(tokens, _kv(demo_backend, tokens)[0])
    c.disk.flush()
    other_layout = disk_cache(demo_backend, tmp_path, layout=lambda: json.dumps({"classes": ["RotatingKVCache"]}))
    with caplog.at_level(logging.WARNING, logger="tinytitan.cache"):
        other_layout.fetch(list(range(100, 201)))
    lines = [r.getMessage() for r in caplog.records if "another cache layout" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("prompt cache on disk: 3 file(s)"), lines

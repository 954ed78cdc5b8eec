"""An entry read back from disk knows where its answer starts, as the file does."""
import numpy as np

from tinytitan.engine.cache.entries import PromptFacts
from tinytitan.engine.cache.memory import PromptCache


def kv(n: int) -> list:
    """A one-layer KV cache of ``n`` positions (2 heads of 64)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 2, n, 64)), mx.zeros((1, 2, n, 64)))
    return [c]


def two_files(tmp_path) -> tuple:
    """Two files written to ``tmp_path`` sharing a system prompt, a long one and a short one →
    (system, long, short, the PromptDisk that wrote them)."""
    from tinytitan.engine.cache.disk import PromptDisk

    system = list(range(1000, 1100))
    long, short = system + list(range(3000, 3300)), system + list(range(4000, 4020))
    first = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    for tokens in (long, short):
        first.put(np.array(tokens), kv(len(tokens)), ())
    assert first.flush()
    return system, long, short, first


def test_an_entry_read_back_from_disk_gives_way_to_the_next_turn_as_in_memory(tmp_path):
    """A file says where its answer starts: the entry read back from it knows that too, so the next turn's entry
    (whose prompt starts with the file's prompt but parts from its answer) supersedes it, as it supersedes the entry
    the file was written from; a restarted server otherwise keeps a copy of each conversation it resumed."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.prompt.splice import Span

    def kv(n):
        c = KVCache()
        c.update_and_fetch(mx.zeros((1, 1, n, 8)), mx.zeros((1, 1, n, 8)))
        return [c]

    def cache():
        c = PromptCache(1 << 30)
        c.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
        return c

    prompt, answer = list(range(1000, 1080)), list(range(500, 530))
    first = cache()
    first.remember(prompt, (Span(len(prompt), "p"),), lambda ids: "a" * len(ids))
    first.store(prompt + answer, kv(len(prompt) + len(answer)), facts=PromptFacts(len(prompt)))
    assert first.disk.flush()
    restarted = cache()
    turn = prompt + [60, 61, 62]  # the answer sent back otherwise, then a new user turn
    assert restarted.fetch(turn)[1] == len(prompt)  # read back from the file
    restarted.store(turn + [90, 91], kv(len(turn) + 2), facts=PromptFacts(len(turn)))
    assert len(restarted.entries) == 1


def test_a_file_too_large_for_the_memory_budget_is_never_read(tmp_path):
    """A file written under a larger ``--prompt-cache-mib`` (a restart with less, another server on the directory)
    holds more than memory may keep: it is not read back (its whole KV, then thrown away) at every request."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk

    tokens = list(range(1000, 1300))
    kv = KVCache()
    kv.update_and_fetch(mx.zeros((1, 2, len(tokens), 64)), mx.zeros((1, 2, len(tokens), 64)))
    size = kv.nbytes

    def cache(max_bytes):
        c = PromptCache(max_bytes)
        c.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
        return c

    first = cache(1 << 30)
    first.store(tokens, [kv])
    assert first.disk.flush()
    small = cache(size - 1)
    for _ in range(2):
        assert small.fetch(tokens + [7]) == (None, 0)
    assert small.disk.reads == 0
    fits = cache(size)  # one that fits is read back as before
    assert fits.fetch(tokens + [7])[1] == len(tokens) and fits.disk.reads == 1

    [f] = tmp_path.glob("*.safetensors")  # a file written before files said their size: read once, then set aside
    arrays, meta = mx.load(str(f), return_metadata=True)
    del meta["0.tinytitan_kv_bytes"]
    mx.save_safetensors(str(f), arrays, meta)
    older = cache(size - 1)
    for _ in range(2):
        assert older.fetch(tokens + [7]) == (None, 0)
    assert older.disk.reads == 1


def test_a_file_whose_header_is_damaged_is_ignored_alone(tmp_path, caplog):
    """A file of this format whose header cannot be made an entry (its ids cut short: a torn copy, a bit flipped)
    is ignored with a warning; the directory's other files are still read back and new ones written. It made the
    whole directory unusable, at every start, since nothing was written and so nothing evicted it."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk

    def kv(n):
        c = KVCache()
        c.update_and_fetch(mx.zeros((1, 1, n, 8)), mx.zeros((1, 1, n, 8)))
        return [c]

    a, b = list(range(1000, 1100)), list(range(2000, 2100))
    first = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    for tokens in (a, b):
        first.put(np.array(tokens), kv(len(tokens)), ())
    assert first.flush()
    damaged = first.best(np.array(a + [1]))[0].path
    arrays, meta = mx.load(str(damaged), return_metadata=True)
    meta["0.tinytitan_tokens"] = meta["0.tinytitan_tokens"][:-3]
    mx.save_safetensors(str(damaged), arrays, meta)

    restarted = PromptCache(1 << 30)
    restarted.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    assert restarted.fetch(b + [1])[1] == len(b)  # the other file: read back
    assert "has a damaged header" in caplog.text and damaged.name in caplog.text
    assert restarted.fetch(a + [1]) == (None, 0)
    restarted.disk.put(np.array(a), kv(len(a)), ())  # and written anew
    assert restarted.disk.flush() and restarted.disk.stats()["writes"] == 1


def test_a_shorter_file_stands_in_for_the_longest_where_that_one_is_too_large(tmp_path):
    """The file sharing the most with a prompt holds more than the memory budget keeps (written under a larger
    ``--prompt-cache-mib``): the longest of the files that fit is read back instead (another conversation's, sharing
    the system prompt), where nothing was read and the whole prompt computed again."""
    from tinytitan.engine.cache.disk import PromptDisk

    system, long, short, first = two_files(tmp_path)
    budget = kv(len(short))[0].nbytes  # (the long file's KV holds more)
    restarted = PromptCache(budget)
    restarted.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    assert restarted.fetch(long + [7])[1] == len(system)  # the short file, trimmed back to what they share
    assert restarted.disk.reads == 1


def test_a_file_that_fails_to_load_is_removed_not_indexed_again_at_each_start(tmp_path, caplog):
    """A file of this model whose data is torn (its header whole: it is indexed) fails to load: it is removed, so
    the next start neither indexes it nor reads it again to fail again (a warning and a wasted read each start)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk

    tokens = list(range(1000, 1100))
    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 1, len(tokens), 8)), mx.zeros((1, 1, len(tokens), 8)))
    first = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    first.put(np.array(tokens), [c], ())
    assert first.flush()
    [f] = tmp_path.glob("*.safetensors")
    with open(f, "r+b") as out:  # the data cut short, the header as written
        out.truncate(f.stat().st_size - 100)

    for warned in (True, False):  # a start, then the next
        caplog.clear()
        restarted = PromptCache(1 << 30)
        restarted.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
        assert restarted.fetch(tokens + [7]) == (None, 0)
        assert ("could not be read back" in caplog.text) is warned
    assert not f.exists()


def test_a_damaged_header_is_removed_with_its_warning_once(tmp_path, caplog):
    """A file of this format whose header cannot be made an entry is removed with its warning: left there, every
    start read its header and warned again."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk

    c = KVCache()
    c.update_and_fetch(mx.zeros((1, 1, 100, 8)), mx.zeros((1, 1, 100, 8)))
    first = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    first.put(np.arange(1000, 1100), [c], ())
    assert first.flush()
    [f] = tmp_path.glob("*.safetensors")
    arrays, meta = mx.load(str(f), return_metadata=True)
    meta["0.tinytitan_tokens"] = meta["0.tinytitan_tokens"][:-3]
    mx.save_safetensors(str(f), arrays, meta)
    for warned in (True, False):  # a start, then the next
        caplog.clear()
        assert PromptDisk(tmp_path, [], lambda: "layout", 1 << 30).best(np.arange(1000, 1101)) == (None, 0)
        assert ("has a damaged header" in caplog.text) is warned
    assert not f.exists()


def test_an_older_file_found_too_large_gives_way_to_the_next_best_in_the_same_request(tmp_path):
    """The longest file is one written before files said their size, and turns out to hold more than the memory
    budget keeps once read: the next best file (one that fits) is read back for the same prompt, where the whole
    prompt was computed again; a file that fails to load gives way alike. At most ``READ_BACK_TRIES`` files."""
    import mlx.core as mx

    from tinytitan.engine.cache import memory
    from tinytitan.engine.cache.disk import PromptDisk

    system, long, short, first = two_files(tmp_path)
    older = first.best(np.array(long + [7]))[0].path
    arrays, meta = mx.load(str(older), return_metadata=True)
    del meta["0.tinytitan_kv_bytes"]  # (written before files said their size)
    mx.save_safetensors(str(older), arrays, meta)

    def restarted():
        c = PromptCache(kv(len(short))[0].nbytes)  # (the long file's KV holds more)
        c.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
        return c

    c = restarted()
    assert c.fetch(long + [7])[1] == len(system)  # the short file, in the same request
    assert c.disk.reads == 2 and older.exists()  # (the older one read once, kept for a server with a larger budget)

    [other] = [p for p in tmp_path.glob("*.safetensors") if p != older]
    with open(other, "r+b") as out:  # the short file's data torn too: two tries, both spent, nothing read back
        out.truncate(other.stat().st_size - 100)
    c = restarted()
    c.disk.put(np.array(system + [5] * 40), kv(140), ())  # a third that would fit, past the bound on tries
    assert c.disk.flush() and memory.READ_BACK_TRIES == 2
    assert c.fetch(long + [7]) == (None, 0)
    assert c.fetch(long + [7])[1] == len(system)  # the next request goes on to the next


def test_the_probe_reports_of_the_disk_what_a_fetch_would_read_back(tmp_path):
    """The cache probe (a miss's diagnosis, the prompt-cache tools) reported a file holding more than the memory
    budget keeps as cached, though no fetch reads it: a turn computed whole was told it was a hit. It now reports
    what the lookup reads back: nothing here, the file where the budget keeps it."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk

    tokens = list(range(1000, 1300))
    kv = KVCache()
    kv.update_and_fetch(mx.zeros((1, 2, len(tokens), 64)), mx.zeros((1, 2, len(tokens), 64)))
    first = PromptCache(1 << 30)
    first.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    first.store(tokens, [kv])
    assert first.disk.flush()

    for budget, reused in ((kv.nbytes - 1, 0), (kv.nbytes, len(tokens))):
        c = PromptCache(budget)
        c.disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
        c.disk.best(np.array(tokens))  # (the index read and the layout known: what ``peek`` needs)
        probe = c.probe(tokens + [7])
        assert (probe.n, probe.length) == (reused, reused), budget
        assert c.fetch(tokens + [7])[1] == reused  # as the fetch then finds

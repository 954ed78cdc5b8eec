"""A model's fill-in-the-middle layout is found from its vocabulary once per tokenizer (engine/prompt/fill_in.py),
shared by every preparation of it: reading a vocabulary of 50k tokens takes tens of milliseconds, which an
editor's completion would otherwise wait for at every request, and /api/show at every call. Once also when
several threads ask first at once (tokenizer_facts.once_per_tokenizer)."""

from __future__ import annotations

from tinytitan.engine.prompt.fill_in import FillInTheMiddle


class Vocabulary:
    def __init__(self, tokens):
        self.tokens, self.reads = tokens, 0

    def get_vocab(self):
        self.reads += 1
        return {t: i for i, t in enumerate(self.tokens)}


class Preparation(FillInTheMiddle):
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


def test_the_layout_is_read_once_per_tokenizer():
    coder = Vocabulary(["a", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"])
    prep = Preparation(coder)
    assert [prep.fim_tokens for _ in range(3)] == [("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")] * 3
    assert prep.fim_layout[1] == "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
    assert coder.reads == 1
    plain = Vocabulary(["a", "b"])  # another tokenizer (a model swapped in): read afresh, and a no is kept too
    prep.tokenizer = plain
    assert [prep.fim_layout for _ in range(3)] == [None] * 3 and plain.reads == 1
    prep.tokenizer = coder  # swapped back: its layout is still known
    assert prep.fim_tokens is not None and coder.reads == 1


def test_preparations_of_one_tokenizer_share_its_layout():
    coder = Vocabulary(["a", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"])
    assert [Preparation(coder).fim_tokens for _ in range(3)] == [("<fim_prefix>", "<fim_suffix>", "<fim_middle>")] * 3
    assert coder.reads == 1  # (one read for every preparation of the tokenizer)
    other = Vocabulary(["a", "[PREFIX]", "[SUFFIX]"])  # a second tokenizer: its own read, its own layout
    assert Preparation(other).fim_tokens == ("[PREFIX]", "[SUFFIX]") and other.reads == 1
    assert Preparation(coder).fim_tokens == ("<fim_prefix>", "<fim_suffix>", "<fim_middle>") and coder.reads == 1


def test_threads_asking_first_at_once_measure_once():
    """Prompts are prepared on worker threads, and an editor's completions arrive together: a figure that takes
    a second to measure (the gaps' tokenizer copy at a 128k vocabulary) is measured once, the others waiting."""
    import threading
    import time

    from tinytitan.engine.prompt.tokenizer_facts import once_per_tokenizer

    table: dict = {}
    tokenizer, measured, start = object(), [], threading.Barrier(4)

    def measure():
        measured.append(1)
        time.sleep(0.05)  # (long enough for the other threads to ask meanwhile)
        return "figure"

    got: list = []

    def ask():
        start.wait()
        got.append(once_per_tokenizer(table, tokenizer, measure))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["figure"] * 4 and len(measured) == 1


def test_a_slow_measure_holds_up_only_its_own_figure():
    """A tokenizer copy (a second at a 128k vocabulary) measured on a worker thread does not hold up another
    figure, such as the fill-in-the-middle layout a model's card reads on the event loop."""
    import threading

    from tinytitan.engine.prompt.tokenizer_facts import once_per_tokenizer

    slow_table, quick_table, tokenizer = {}, {}, object()
    inside, release = threading.Event(), threading.Event()

    def slow():
        inside.set()
        release.wait(10)
        return "copy"

    worker = threading.Thread(target=once_per_tokenizer, args=(slow_table, tokenizer, slow))
    worker.start()
    try:
        assert inside.wait(10)
        got: list = []
        quick = threading.Thread(
            target=lambda: got.append(once_per_tokenizer(quick_table, tokenizer, lambda: "layout")))
        quick.start()
        quick.join(5)
        assert got == ["layout"]  # (with one lock for every table it waited for the copy)
    finally:
        release.set()
        worker.join()
    assert once_per_tokenizer(slow_table, tokenizer, lambda: "again") == "copy"

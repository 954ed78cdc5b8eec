"""A grammar mask's reported time (``grammar_mask_s`` in a turn's timing) is its own work — consuming the sampled
token, computing the next mask — never the wait for the sampled token that its call also holds (that wait is the
forward pass's). A fake clock moves only where the test says, so nothing here is timed."""

from __future__ import annotations


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sampled:
    """The token context a processor sees: its last token takes ``wait`` seconds to come (the forward pass)."""

    def __init__(self, clock: Clock, token: int, wait: float):
        self.clock, self.token, self.wait = clock, token, wait

    def __getitem__(self, _index):
        return self

    def item(self) -> int:
        self.clock.now += self.wait
        return self.token


def test_the_masks_time_leaves_out_the_wait_for_the_sampled_token(demo_backend, monkeypatch):
    import mlx.core as mx

    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import GrammarMask, compile_grammar, processor

    compiled = compile_grammar(Grammar("json_schema", {"type": "object"}), demo_backend.tokenizer,
                               demo_backend.vocab_size)
    mask = GrammarMask(compiled)
    clock = Clock()
    monkeypatch.setattr(processor.time, "perf_counter", clock)
    consume = mask.matcher.consume_token

    class Matcher:  # consuming a token takes 0.25 s on the fake clock
        def consume_token(self, token):
            clock.now += 0.25
            return consume(token)

        def __getattr__(self, name):
            return getattr(mask.matcher_inner, name)

    mask.matcher_inner, mask.matcher = mask.matcher, Matcher()
    logits = mx.zeros((1, mask.vocab_size))
    mask(Sampled(clock, 0, wait=10.0), logits)  # the prompt: nothing to consume, the first mask
    brace = compiled.tokenizer.tokenize_str("{")[0]
    out = mask(Sampled(clock, brace, wait=10.0), logits)  # the sampled "{" came after 10 s of forward pass
    assert mask.seconds == 0.25
    mask.advance(compiled.tokenizer.tokenize_str('"')[0])  # a forced token: consumed, the next mask computed
    assert mask.seconds == 0.5
    assert clock.now == 10.5
    allowed = mx.isfinite(out[0])
    assert bool(allowed[compiled.tokenizer.tokenize_str('"')[0]]) and not bool(allowed[brace])

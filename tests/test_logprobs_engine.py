"""Token log probabilities from the engine (engine/decode/logprobs.py): the model's own log-softmax at each
generated token's position, on the real MLX path (the demo model), alone, in a batch and under a grammar."""

from __future__ import annotations

import dataclasses

import pytest

from batching_helpers import RECORDS, alone_and_together, demo, req, run, summary  # noqa: F401  (demo: a fixture)
from tinytitan.engine.engine import Engine
from tinytitan.events import Finished, TextDelta


def figures(events) -> list:
    return [lp for ev in events if isinstance(ev, TextDelta) for lp in ev.logprobs]


def spelled(lps) -> str:
    """The text the tokens' bytes spell, less trailing white space."""
    return b"".join(bytes(lp.bytes) for lp in lps).decode().rstrip()


def text(events) -> str:
    return "".join(ev.text for ev in events if isinstance(ev, TextDelta))


def reference(backend, r) -> list[tuple[int, list[float]]]:
    """mlx-lm's own greedy decode of ``r``: each token and the log-softmax of the logits it was drawn from."""
    import mlx.core as mx
    from mlx_lm import stream_generate

    prepared = backend.prepare(r)
    out = []
    for resp in stream_generate(backend.model, backend.tokenizer, mx.array(prepared.tokens),
                                max_tokens=prepared.max_tokens):
        if resp.token in backend.tokenizer.eos_token_ids:
            break
        out.append((resp.token, resp.logprobs.astype(mx.float32).tolist()))
    return out


async def test_each_token_carries_the_model_log_probability_it_was_drawn_from(demo):
    r = req("Write a haiku about the sea.", max_tokens=24, logprobs=3)
    events = await run(Engine(demo, max_batch=1), r)
    got = figures(events)
    want = reference(demo, dataclasses.replace(r, logprobs=None))
    finished = events[-1]
    assert isinstance(finished, Finished) and len(got) == finished.usage.completion_tokens == len(want)
    assert spelled(got) == text(events).rstrip()  # (the answer's trailing white space is not sent)
    for lp, (token, dist) in zip(got, want):
        assert lp.token == demo.tokenizer.decode([token])
        assert lp.logprob <= 0 and lp.logprob == pytest.approx(dist[token], abs=1e-3)
        assert len(lp.top) == 3 and [t.logprob for t in lp.top] == sorted((t.logprob for t in lp.top), reverse=True)
        best = sorted(range(len(dist)), key=lambda i: -dist[i])[:3]
        assert [t.logprob for t in lp.top] == pytest.approx([dist[i] for i in best], abs=1e-3)
        assert lp.top[0].token == lp.token and lp.top[0].logprob == lp.logprob  # greedy: the chosen is the likeliest


async def test_zero_alternatives_and_none_asked(demo):
    engine = Engine(demo, max_batch=1)
    plain = await run(engine, req("Name a colour.", max_tokens=8))
    chosen_only = await run(engine, req("Name a colour.", max_tokens=8, logprobs=0))
    assert figures(plain) == [] and len(figures(chosen_only)) == 8
    assert all(lp.top == () and lp.logprob <= 0 for lp in figures(chosen_only))
    assert text(plain) == text(chosen_only)


async def test_in_a_batch_a_row_gets_what_it_gets_alone_and_the_others_are_untouched(demo):
    from batching_helpers import together

    rows = [req("Tell me a story.", max_tokens=16, logprobs=2), req("Describe a forest.", max_tokens=16),
            req("Tell me a story.", temperature=0.9, seed=3, max_tokens=16, logprobs=0)]
    engine = Engine(demo, max_batch=3)
    alone = [await run(engine, r) for r in rows]
    both = await together(engine, dict(enumerate(rows)))
    for i, a in enumerate(alone):
        t = both[i]
        assert summary(a) == summary(t) or text(a) == text(t)
        assert [lp.logprob for lp in figures(a)] == pytest.approx([lp.logprob for lp in figures(t)], abs=1e-3)
    assert figures(both[1]) == [] and len(figures(both[0])) == 16 and len(figures(both[2])) == 16
    # sampled at a temperature: the first token's figure is the model's own distribution, not the tempered one
    first = reference(demo, dataclasses.replace(rows[2], logprobs=None, temperature=0))[0][1]
    lp = figures(alone[2])[0]
    assert any(abs(first[i] - lp.logprob) < 1e-3 for i in range(len(first))
               if demo.tokenizer.decode([i]) == lp.token)


async def test_under_a_grammar_every_token_is_sampled_and_reported(demo):
    """Forced runs are read one token at a time for a row that asks (each token has its own distribution); the
    answer is the one the row gives without figures."""
    r = req("Give me records.", max_tokens=80, grammar=RECORDS)
    engine = Engine(demo, max_batch=1)
    plain = summary(await run(engine, r))
    asked = await run(engine, dataclasses.replace(r, logprobs=1))
    assert text(asked) == "".join(getattr(ev, "text", "") for ev in plain if isinstance(ev, TextDelta))
    assert len(figures(asked)) == asked[-1].usage.completion_tokens
    assert spelled(figures(asked)) == text(asked).rstrip()
    assert all(lp.logprob <= 0 and len(lp.top) == 1 for lp in figures(asked))

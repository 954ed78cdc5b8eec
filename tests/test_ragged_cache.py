"""The batch's KV cache with holes (engine/decode/ragged.py), on the demo model's real layers: rows that read
different numbers of tokens in one pass, and a verify's rejected draft tokens, leave holes that the mask hides
and the positions skip — so every row's logits are what it computes alone on a plain cache, a row taken out
holds only its valid positions, and rows joining and leaving keep the holes where they belong."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def model(demo_backend):
    return demo_backend.ensure_loaded() or demo_backend.model


def alone(model, tokens: list[int]):
    """Logits after each of ``tokens`` on a plain cache, one pass; and that cache."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    kv = make_prompt_cache(model)
    logits = model(mx.array([tokens]), cache=kv)[0]
    mx.eval(logits)
    return logits, kv


def own_cache(model, tokens: list[int]):
    return alone(model, tokens)[1]


def close(a, b) -> bool:
    import mlx.core as mx

    return bool(mx.allclose(a, b, atol=2e-4, rtol=2e-4).item())


def test_ragged_passes_and_rejected_drafts_give_each_row_its_own_logits(model):
    import mlx.core as mx

    from tinytitan.engine.decode.ragged import merge

    prompts = [[5, 9, 14, 22, 31, 40], [7, 8, 9], [100, 3, 3, 3, 3, 3, 3, 3, 2]]
    kv = merge([own_cache(model, p) for p in prompts], True)
    # one pass: row 0 reads 4 tokens (a draft of 3 after its last), row 1 one, row 2 two (a forced run)
    feeds = [[50, 51, 52, 53], [60], [70, 71]]
    width = 4
    inputs = mx.array([f + [0] * (width - len(f)) for f in feeds])
    logits = model(inputs, cache=kv)
    for i, (p, f) in enumerate(zip(prompts, feeds)):
        want = alone(model, p + f)[0][len(p):]
        assert close(logits[i, :len(f)], want)
    kept = [2, 1, 2]  # row 0's verify kept its first token and one draft token; the rest are holes
    for layer in kv:
        layer.keep(kept, width)
    # the next pass: every row one token, after exactly what it kept
    nxt = [[80], [81], [82]]
    logits = model(mx.array(nxt), cache=kv)
    for i, (p, f, k, n) in enumerate(zip(prompts, feeds, kept, nxt)):
        want = alone(model, p + f[:k] + n)[0][-1]
        assert close(logits[i, 0], want)
    for layer in kv:
        layer.keep([1, 1, 1], 1)
    # a row taken out holds only its valid positions: alone it goes on as if it never shared a batch
    out = [layer.extract(0) for layer in kv]
    assert out[0].offset == len(prompts[0]) + kept[0] + 1
    history = prompts[0] + feeds[0][:kept[0]] + nxt[0]
    got = model(mx.array([[90]]), cache=out)[0, -1]
    assert close(got, alone(model, history + [90])[0][-1])


def test_rows_joining_and_leaving_keep_their_holes(model, monkeypatch):
    import mlx.core as mx

    from tinytitan.engine.decode import ragged
    from tinytitan.engine.decode.ragged import compact_if_holey, merge

    monkeypatch.setattr(ragged, "HOLES_MIN", 1)  # compact at the first hole (see the end)
    monkeypatch.setattr(ragged, "HOLES_SHARE", 0.0)

    prompts = [[5, 9, 14], [7, 8, 9, 10, 11]]
    kv = merge([own_cache(model, p) for p in prompts], True)
    model(mx.array([[20, 21, 22], [30, 0, 0]]), cache=kv)
    for layer in kv:
        layer.keep([3, 1], 3)
    joining = [12, 13]
    newcomer = merge([own_cache(model, joining)], True)
    for mine, theirs in zip(kv, newcomer):
        mine.extend(theirs)
    histories = [prompts[0] + [20, 21, 22], prompts[1] + [30], joining]
    for layer in kv:
        layer.filter([1, 2])  # the first row leaves
    histories = histories[1:]
    logits = model(mx.array([[40], [41]]), cache=kv)
    for i, h in enumerate(histories):
        assert close(logits[i, 0], alone(model, h + [40 + i])[0][-1])
    for layer in kv:
        layer.keep([1, 1], 1)
    # compacted (holes past their share): the same logits after it
    kv = compact_if_holey(kv, [2, 0])  # the first row's verify left 2 holes; the newcomer none
    assert kv is not None and kv[0].holes() == 0
    logits = model(mx.array([[50], [51]]), cache=kv)
    for i, h in enumerate(histories):
        assert close(logits[i, 0], alone(model, h + [40 + i, 50 + i])[0][-1])

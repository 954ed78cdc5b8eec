"""A grammar mask hands mlx the same boolean row again for bits it has handed before (a JSON document's
positions repeat a few dozen masks), never a row made for other bits, and keeps a bounded number of them."""

from __future__ import annotations

import numpy as np


def expected(mask, width: int) -> np.ndarray:
    bits = np.unpackbits(mask.bitmask[0].view(np.uint8), bitorder="little").astype(bool)
    return np.concatenate([bits, np.zeros(max(0, width - bits.shape[0]), dtype=bool)])[:width]


def walk(compiled, text: str):
    """The mask at each token of ``text`` (a JSON document the grammar allows): (bits, mlx row) pairs."""
    from tinytitan.engine.structured import GrammarMask

    mask = GrammarMask(compiled)
    width = compiled.vocab_size
    seen = []
    for token in compiled.tokenizer.tokenize_str(text):
        row = mask.allowed_mx(width)
        seen.append((mask.bitmask.tobytes(), row))
        assert (np.array(row) == expected(mask, width)).all()
        assert bool(np.array(row)[token])  # the document's next token is allowed
        mask.consume(token)
    return seen


def test_a_mask_seen_before_is_the_same_row_and_other_bits_get_their_own(demo_backend):
    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import compile_grammar

    schema = {"type": "array", "items": {"type": "object", "required": ["name"],
                                         "properties": {"name": {"type": "string"}}, "additionalProperties": False}}
    compiled = compile_grammar(Grammar("json_schema", schema), demo_backend.tokenizer, demo_backend.vocab_size)
    seen = walk(compiled, '[{"name":"ab"},{"name":"cd"},{"name":"ef"}]')
    rows: dict[bytes, object] = {}
    reused = 0
    for bits, row in seen:
        if bits in rows:
            assert row is rows[bits]
            reused += 1
        rows[bits] = row
    assert reused > 0
    assert len({id(r) for r in rows.values()}) == len(rows)  # different bits never share a row


def test_the_rows_kept_are_bounded(demo_backend, monkeypatch):
    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import GrammarMask, compile_grammar, processor

    width = demo_backend.vocab_size
    monkeypatch.setattr(processor, "MX_CACHE_BYTES", 2 * width)  # two rows
    compiled = compile_grammar(Grammar("json_schema", {"type": "array", "items": {"type": "integer"}}),
                               demo_backend.tokenizer, width)
    mask = GrammarMask(compiled)
    kept = 0
    for token in compiled.tokenizer.tokenize_str("[1,22,333,4444,1,22,333,4444]"):
        row = mask.allowed_mx(width)
        assert (np.array(row) == expected(mask, width)).all()  # a row made again after eviction is right too
        assert len(mask.handed) <= 2
        kept = max(kept, len(mask.handed))
        mask.consume(token)
    assert kept == 2  # it does keep rows, up to the bound

"""An answer the output cap cuts whose text happens to end in what could begin a marker keeps that text where
the tail is too short to be markup cut short (``CUT_MARKER_MIN``): a table cell opening in HTML (``<th``), a
comparison (``x <``), Gemma's closing code fence when tools are declared. A client that continues a capped answer
(finish_reason length, then "continue") would otherwise lose those characters for good."""

from __future__ import annotations

import pytest

from tinytitan.engine import families
from tinytitan.events import TextDelta


def text(fam, pieces, calls=False):
    p = fam.parser(False, {}, {"f": {"type": "object"}} if calls else {}, calls, False)
    events = [e for piece in pieces for e in p.feed(piece)[0]] + p.finish(cut=True)
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.mark.parametrize("fam,pieces,calls", [
    (families.QWEN_FAMILY, ["<table><tr>", "<th"], False),  # no tools declared: only <think> is a marker
    (families.QWEN_FAMILY, ["if a", " <"], False),
    (families.GEMMA, ["```python\nprint(1)\n", "```"], True),
])
def test_an_answer_the_cap_cut_keeps_its_own_last_characters(fam, pieces, calls):
    assert text(fam, pieces, calls) == "".join(pieces).strip()

"""A rendered prompt's token ids, reusing the ids the cache already holds for the same text.

Rules:
- A cache entry knows what its ids say, as a run of spans: each span is a number of ids and exactly the text
  they decode to, and says whether the model generated them (an answer) or the tokenizer made them from text
  (a prompt). An answer's ids are rarely what the tokenizer would make of its text when the client sends it
  back, so re-tokenizing the next prompt would lose the cache from the first answer on.
- ``splice(text, …)`` walks each entry's spans along the rendered text: every span whose text is the text at
  that place is taken as it is (its ids); a generated span that matches only in part gives the ids of the part
  it covers; the first span that does not match ends the walk. The entry that covers the most text wins, and
  the rest of the text is tokenized. A prompt span matched in part is tokenized again from its start: the
  tokenizer, started at the same place, makes the same ids up to the change, and the cache's token match
  finds them.
- The prompt the model reads is still exactly what the template rendered: the spliced ids decode to the
  rendered text, character for character, or the plain tokenization is used. Generated text that decoded to a
  replacement character (a split or invalid UTF-8 sequence) is never spliced: the client sent back the
  character U+FFFD, not those bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

log = logging.getLogger("tinytitan.cache")

REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class Span:
    tokens: int  # how many ids
    text: str  # what they decode to, exactly
    generated: bool = False  # the model's own ids (an answer), not the tokenizer's reading of the text


def common_chars(a: str, b: str, start_a: int = 0) -> int:
    """Length of the common prefix of ``a[start_a:]`` and ``b`` (slices compared in C, halving)."""
    n = min(len(a) - start_a, len(b))
    if n <= 0:
        return 0
    if a[start_a:start_a + n] == b[:n]:
        return n
    lo, hi = 0, n  # a's slice and b agree on [0, lo), not on [0, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[start_a + lo:start_a + mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def generated_prefix(ids: Sequence[int], span_text: str, text: str, at: int,
                     decode: Callable[[Sequence[int]], str]) -> tuple[int, int]:
    """How many of a generated span's ids decode to text found at ``text[at:]``: (ids, characters)."""
    limit = common_chars(text, span_text[: span_text.find(REPLACEMENT)] if REPLACEMENT in span_text else span_text,
                         at)
    if limit <= 0:
        return 0, 0
    lo, hi = 0, len(ids)  # decode(ids[:lo]) fits within limit; find the largest such lo
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(decode(ids[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    for j in range(lo, max(lo - 8, 0), -1):  # a boundary inside a character decodes to U+FFFD: step back
        piece = decode(ids[:j])
        if REPLACEMENT not in piece and text.startswith(piece, at):
            return j, len(piece)
    return 0, 0


@dataclass
class Walk:
    """How far an entry's spans follow the text: ``tokens`` ids and ``chars`` characters, as ``spans``."""
    tokens: int = 0
    chars: int = 0
    spans: tuple[Span, ...] = ()


def walk(ids: Sequence[int], spans: Sequence[Span], text: str, decode: Callable[[Sequence[int]], str]) -> Walk:
    tokens = chars = 0
    taken: list[Span] = []
    for span in spans:
        if span.generated and REPLACEMENT in span.text or not text.startswith(span.text, chars):
            if span.generated:
                n, c = generated_prefix(ids[tokens:tokens + span.tokens], span.text, text, chars, decode)
                if n:
                    taken.append(Span(n, text[chars:chars + c], True))
                    tokens, chars = tokens + n, chars + c
            break
        taken.append(span)
        tokens, chars = tokens + span.tokens, chars + len(span.text)
    return Walk(tokens, chars, tuple(taken))


def splice(text: str, candidates: Sequence[tuple[Sequence[int], Sequence[Span]]],
           encode: Callable[[str], list[int]], decode: Callable[[Sequence[int]], str]) -> tuple[list[int], tuple[Span, ...]]:
    """The ids for ``text``, and the spans they are: the best candidate's matching spans (ids as cached), then
    the rest of the text tokenized."""
    best: tuple[Walk, Sequence[int]] | None = None
    for ids, spans in candidates:
        w = walk(ids, spans, text, decode)
        if w.chars and (best is None or w.chars > best[0].chars):
            best = w, ids
    if best is None or not any(s.generated for s in best[0].spans):
        # nothing generated to keep: the plain tokenization is what the cache's token match sees best
        ids = encode(text)
        return ids, (Span(len(ids), text),)
    w, cached = best
    rest = text[w.chars:]
    rest_ids = encode(rest) if rest else []
    head = cached[:w.tokens]
    ids = (head.tolist() if hasattr(head, "tolist") else list(head)) + rest_ids  # plain ints (mlx takes no numpy ints)
    if decode(ids) != text:  # never: but a tokenizer whose decoding rewrites text is not trusted with a splice
        log.debug("prompt splice: the spliced ids do not decode to the rendered prompt; tokenized plainly")
        ids = encode(text)
        return ids, (Span(len(ids), text),)
    spans = w.spans + ((Span(len(rest_ids), rest),) if rest else ())
    return ids, spans

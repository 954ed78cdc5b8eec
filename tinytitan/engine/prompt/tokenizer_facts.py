"""What prompt preparation reads of a tokenizer: how a text reads as ids and ids read back as text, its added
tokens, and figures measured once per tokenizer (``once_per_tokenizer``).

Rules:
- A prompt's text is encoded by ``ids_of``, not the tokenizer's ``encode``: a text spelling the fill token a
  tokenizer class splits its input at (transformers' CodeLlamaTokenizer's ``<FILL_ME>``) is its characters. (A
  fill-in-the-middle gap, which reads every special token's spelling as text, by ``fill_in.as_text``.)
- A figure measured from a tokenizer is kept in a table keyed by the tokenizer's ``id``, beside the tokenizer
  itself (so an id reused by a later tokenizer is never taken for it); tokenizers are few and live as long as
  their backend.
- A figure is measured once even when several threads ask for it first at once (prompts are prepared on worker
  threads: an editor's completions arrive together, and a copy of a 128k vocabulary takes a second): each table
  has its own lock, so a slow measure holds up only those waiting for the same figure (a model's card, read on
  the event loop, asks for its fill-in-the-middle layout, never for a tokenizer copy). Reading a kept figure
  takes no lock.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable, Sequence, TypeVar

from tokenizers import Tokenizer

from ...errors import invalid

T = TypeVar("T")


class _NoSequenceLengthWarning(logging.Filter):
    """transformers warns once per tokenizer when a text it encodes is longer than the tokenizer's
    ``model_max_length``. The server measures every prompt against the model's context window itself (and
    refuses what does not fit), so the warning says nothing about what happens next: it stays out of the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token indices sequence length is longer than")


logging.getLogger("transformers.tokenization_utils_base").addFilter(_NoSequenceLengthWarning())


def once_per_tokenizer(table: dict[int, tuple[Any, T]], tokenizer, measure: Callable[[], T]) -> T:
    """``measure()`` for ``tokenizer``, the first time it is asked for; the kept value after that."""
    known = table.get(id(tokenizer))
    if known is None or known[0] is not tokenizer:
        with _measuring(table):  # (re-entrant: a figure's measure may ask for another, of another table)
            known = table.get(id(tokenizer))
            if known is None or known[0] is not tokenizer:
                known = table[id(tokenizer)] = (tokenizer, measure())
    return known[1]


_LOCKS: dict[int, threading.RLock] = {}  # id(table) -> its lock (the tables are module-level: they live on)
_LOCKS_LOCK = threading.Lock()


def _measuring(table: dict) -> threading.RLock:
    """The lock a first measure of ``table``'s figure holds (see the rules)."""
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(id(table), threading.RLock())


_IDS_OF: dict[int, tuple[Any, Callable[[str], list[int]]]] = {}  # id(tokenizer) -> (tokenizer, its ``ids_of``)
_UNFILLED: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, its ``_unfilled_copy``)


def ids_of(tokenizer) -> Callable[[str], list[int]]:
    """How a text (a rendered prompt, a raw one, a transcript) reads as ids, no special tokens added: the
    tokenizer's ``encode``, except for a text holding the fill token its class splits its input at
    (``fill_token``). transformers' CodeLlamaTokenizer reads a text holding ``<FILL_ME>`` as an infill prompt:
    those characters dropped, its infill normalizer swapped onto the tokenizer every request shares meanwhile, and
    a text holding it twice fails (a 500). Nor is its Rust tokenizer's encoding the text's: the class adds
    ``<FILL_ME>`` to it as a special token, an id past the model's embedding (CodeLlama's vocabulary has no such
    token; it is that class's convention). Such a text is encoded by a copy of the Rust tokenizer without that
    token (``_unfilled_copy``, made once): its characters, special tokens of the template still read as tokens.
    Only texts holding the fill token take that path: a tokenizer class may rework every text in ``encode``
    (mlx-lm's ``NewlineTokenizer``), which its Rust tokenizer alone would not."""

    def measure() -> Callable[[str], list[int]]:
        fill = getattr(tokenizer, "fill_token", None)
        backend = getattr(tokenizer, "backend_tokenizer", None)

        def encode(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special_tokens=False))

        if not isinstance(fill, str) or not fill or backend is None:
            return encode
        split = bool(getattr(tokenizer, "split_special_tokens", False))

        def encode_filled(text: str) -> list[int]:
            if fill not in text:
                return encode(text)
            unfilled = once_per_tokenizer(_UNFILLED, tokenizer, lambda: _unfilled_copy(backend, fill, split))
            return list(unfilled.encode(text, add_special_tokens=False).ids)

        return encode_filled

    return once_per_tokenizer(_IDS_OF, tokenizer, measure)


def _unfilled_copy(backend, fill: str, split: bool):
    """A copy of a Rust tokenizer without the added token ``fill`` (from its own serialization, that token's entry
    left out), neither cutting nor padding, reading special tokens as its tokenizer's own setting says
    (``split``): the shared one is left as it is, other threads encoding with it."""
    spec = json.loads(backend.to_str())
    spec["added_tokens"] = [t for t in spec.get("added_tokens") or [] if t.get("content") != fill]
    unfilled = Tokenizer.from_str(json.dumps(spec))
    unfilled.no_truncation()
    unfilled.no_padding()
    unfilled.encode_special_tokens = split
    return unfilled


_RESTARTS: dict[int, tuple[Any, frozenset[int]]] = {}  # id(tokenizer) -> (tokenizer, its added tokens)


def text_of(tokenizer) -> Callable[[Sequence[int]], str]:
    """What ids say, exactly: a fast tokenizer's own decoding (``backend_tokenizer``), special tokens written,
    without the wrapper's tidying (``clean_up_tokenization_spaces`` would pass ids for " ." off as "."), and
    without its check of every id's type (half the time of decoding 24,000 ids); other tokenizers' ``decode``."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer.decode

    def decode(ids: Sequence[int]) -> str:
        return backend.decode(ids.tolist() if hasattr(ids, "tolist") else list(ids), skip_special_tokens=False)

    return decode


def restart_tokens(tokenizer) -> frozenset[int]:
    """The tokenizer's added tokens that its input is cut at before anything else (those that take no
    whitespace before them); none for a tokenizer that does not list them. Read once per tokenizer."""

    def measure() -> frozenset[int]:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        return frozenset(int(i) for i, t in added.items() if not getattr(t, "lstrip", False))

    return once_per_tokenizer(_RESTARTS, tokenizer, measure)


_OPENINGS: dict[int, tuple[Any, tuple[int, ...]]] = {}  # id(tokenizer) -> (tokenizer, its opening ids)


def opening_tokens(tokenizer) -> tuple[int, ...]:
    """The ids the tokenizer puts before any text it encodes with its special tokens (Llama's, Gemma's, Mistral's
    BOS; none for Qwen's): what a prompt the model reads whole must open with. A chat template writes them
    itself; a raw prompt gets them here. Read once per tokenizer."""

    def measure() -> tuple[int, ...]:
        try:
            plain = list(tokenizer.encode("a", add_special_tokens=False))
            full = list(tokenizer.encode("a", add_special_tokens=True))
        except TypeError:  # a tokenizer without the switch adds nothing it could be asked to leave out
            return ()
        lead = len(full) - len(plain)
        return tuple(full[:lead]) if lead > 0 and full[lead:] == plain else ()

    return once_per_tokenizer(_OPENINGS, tokenizer, measure)


_ID_COUNTS: dict[int, tuple[Any, int]] = {}  # id(tokenizer) -> (tokenizer, how many ids it knows)


def id_count(tokenizer) -> int | None:
    """How many ids the tokenizer knows, its added tokens included (a fast tokenizer's ``vocab_size`` leaves them
    out: Qwen's and Llama 3's end-of-turn tokens lie past it); None for one that does not list them. Read once."""

    def measure() -> int | None:
        try:
            vocab = tokenizer.get_vocab()
        except (AttributeError, NotImplementedError):
            return getattr(tokenizer, "vocab_size", None)
        return max(vocab.values(), default=-1) + 1 or None

    return once_per_tokenizer(_ID_COUNTS, tokenizer, measure)


def check_logit_bias(bias: tuple, width: int | None) -> None:
    """A biased token id past the model's logits (``width``, from ``id_count`` or the model's config; None: not
    known) is refused, naming it: an id past the logits would be written outside them."""
    for token, _ in bias:
        if width and token >= width:
            raise invalid(f"Invalid key in 'logit_bias': {token}. This model's token ids are 0 to {width - 1}.",
                          param="logit_bias", code="invalid_value")


def checked_prompt_ids(ids: tuple[int, ...], *widths: int | None) -> list[int]:
    """A prompt sent as token ids (legacy Completions), as a list: each id must name a token both the model's
    logits and its tokenizer know (``widths``; None: not known), else the client's 400 naming ``prompt``: an id
    past them would read outside the embedding, or decode to nothing."""
    width = min((w for w in widths if w), default=None)
    for token in ids:
        if width and not 0 <= token < width:
            raise invalid(f"Invalid token id {token} in 'prompt': this model's token ids are 0 to {width - 1}.",
                          param="prompt", code="invalid_value")
    return list(ids)

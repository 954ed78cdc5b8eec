"""The end of an answer never sends half a character.

Rules:
- A byte-level tokenizer may spend several tokens on one character; an answer that ends between them (the
  output cap, a failure, the model's own end of turn) leaves the bytes of a character begun and not finished.
  The streaming detokenizers hold such bytes back while more may come, and their final flush decodes them as
  U+FFFD, a character the model never wrote. Those incomplete bytes are left out, as if the answer had ended
  one token earlier (OpenAI's APIs never send half a character; the tokens still count as generated).
- Only the incomplete tail goes: a U+FFFD the model wrote whole (its three bytes), and bytes that are no UTF-8
  at all (which no later byte could complete), stay as the detokenizer decoded them.
- The bytes come from llguidance's reading of the tokenizer (``structured/compile.llg_tokenizer``, the one the
  grammar masks use). Where it cannot read the tokenizer, the text is left as it is.
"""

from __future__ import annotations

import codecs
import logging
from typing import Sequence

log = logging.getLogger("tinytitan.engine")

REPLACEMENT = "\ufffd"
_LONGEST = 4  # bytes of the longest UTF-8 character: its lead byte is within the last four


def without_cut_character(text: str, ids: Sequence[int], tokenizer, vocab_size: int | None = None) -> str:
    """``text``, the last piece of an answer whose tokens are ``ids``, less the U+FFFD that stands for a
    character the answer's end cut (its bytes begun, not finished)."""
    if not text.endswith(REPLACEMENT) or not ids:
        return text
    try:
        from ..structured.compile import llg_tokenizer

        llt = llg_tokenizer(tokenizer, vocab_size)
        tail, k = b"", 0
        while len(tail) < _LONGEST and k < len(ids):  # the last tokens, enough to hold a character's lead byte
            k += 1
            tail = llt.decode_bytes(list(ids[-k:]))
    except Exception as exc:  # noqa: BLE001 (a tokenizer llguidance cannot read: the text stays)
        log.debug("the bytes of an answer's last tokens are unknown (%s): its end is sent as decoded", exc)
        return text
    whole = tail.decode("utf-8", "replace")
    complete = codecs.getincrementaldecoder("utf-8")("replace").decode(tail, final=False)  # holds the cut bytes
    cut = len(whole) - len(complete)
    return text[:len(text) - cut] if 0 < cut <= len(text) else text

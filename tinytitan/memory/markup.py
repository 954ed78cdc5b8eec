"""Memory text kept from becoming prompt markup.

Rules:
- What memory puts in a prompt (the bootstrap fragment, the memory tools' results) is text the model or a past
  conversation wrote, read back later, possibly in another conversation's system prompt. Where it holds the text of
  one of the model's added tokens (``<|im_end|>``, ``<|im_start|>``, ``<tool_call>``, ``<think>`` …), the prompt's
  encoding would read that text as the token itself: memory could close the system turn and open one of its own.
- So every such text is written with a WORD JOINER (U+2060, invisible) after its first character: the model reads
  the same characters, as plain text, never the token. The change is the same every time (a conversation's prompt
  prefix does not move, and the prompt cache keeps working).
- What the model writes back through memory (a memory call's arguments, a consolidation pass's facts) has that
  joiner taken out again: a model that copies a value it was shown into ``memory_set`` stores the value, not the
  shown text with an invisible character in it (which a later client could write into a file).
- The added tokens are the tokenizer's own (its ``added_tokens_decoder``); a backend without a tokenizer, or one
  that does not list them, has none and its memory text is left as it is.
"""

from __future__ import annotations

import re

JOINER = "\u2060"


def added_texts(tokenizer) -> tuple[str, ...]:
    """The texts of the tokenizer's added tokens that can be broken (two characters or more), longest first."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    texts = {getattr(t, "content", None) for t in added.values()}
    return tuple(sorted((t for t in texts if isinstance(t, str) and len(t) > 1), key=len, reverse=True))


class Shield:
    """Writes a text with every one of ``texts`` in it broken (the identity where there are none); ``restore``
    undoes it in what the model writes back (also where its JSON spells the joiner ``\\u2060``)."""

    def __init__(self, texts: tuple[str, ...] = ()):
        self.pattern = re.compile("|".join(re.escape(t) for t in texts)) if texts else None
        broken = [(t[0] + j + t[1:], t) for t in texts for j in (JOINER, "\\u2060")]
        self.broken = dict(broken)
        self.undo = re.compile("|".join(re.escape(b) for b, _ in broken)) if texts else None

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(lambda m: m.group(0)[0] + JOINER + m.group(0)[1:], text)

    def restore(self, text: str) -> str:
        return text if self.undo is None else self.undo.sub(lambda m: self.broken[m.group(0)], text)

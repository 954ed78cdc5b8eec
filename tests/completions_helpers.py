"""Legacy Completions' test helpers: a streamed answer's text and its chunks' log-probability lists joined, to
compare with the non-streamed answer's."""

from __future__ import annotations


async def streamed_logprobs(c, ask: dict) -> tuple[str, dict]:
    """The streamed answer to ``ask``: its text, and its chunks' log-probability lists joined (tokens,
    token_logprobs, top_logprobs, text_offset), to compare with the non-streamed answer's."""
    joined: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    text = ""
    async for chunk in await c.completions.create(stream=True, **ask):
        for ch in chunk.choices:
            text += ch.text
            if ch.logprobs is not None:
                for key in joined:
                    joined[key] += getattr(ch.logprobs, key)
    return text, joined

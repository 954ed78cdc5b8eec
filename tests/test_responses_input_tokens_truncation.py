"""input_tokens under truncation auto counts the prompt generate reads (review-s20b)."""
from __future__ import annotations

from responses_helpers import client, post
from truncation_helpers import MODEL, TOOLS, history, server


async def test_input_tokens_under_truncation_auto_is_the_responses_usage(serve, demo_tok):
    s, backend = await server(serve, demo_tok)
    args = dict(model=MODEL, input=history(12), instructions="Be brief, always.", truncation="auto", tools=TOOLS)
    counted = await client(s).responses.input_tokens.count(**args)
    r = await client(s).responses.create(store=False, **args)
    assert counted.input_tokens == r.usage.input_tokens

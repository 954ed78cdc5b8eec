"""A thought the client carries back (Responses' ``encrypted_content``, a Messages thinking block's signature) is
opaque to it: one that is not this server's — base64 of JSON nested past the parser's depth included — is read
as no thought, never a 500."""

from __future__ import annotations

import base64

import httpx
import pytest

from anthropic_util import HEADERS

DEEP = base64.b64encode(("[" * 100_000 + "]" * 100_000).encode()).decode()

MESSAGES = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "", "signature": DEEP},
                                              {"type": "text", "text": "yo"}]},
            {"role": "user", "content": "and now?"}]
INPUT = [{"type": "message", "role": "user", "content": "hi"},
         {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": DEEP},
         {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yo", "annotations": []}]},
         {"type": "message", "role": "user", "content": "and now?"}]


@pytest.mark.parametrize("path, body, headers", [
    ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": MESSAGES}, HEADERS),
    ("/v1/messages/count_tokens", {"model": "m", "messages": MESSAGES}, HEADERS),
    ("/v1/responses", {"model": "m", "max_output_tokens": 16, "store": False, "input": INPUT}, {}),
    ("/v1/responses/input_tokens", {"model": "m", "input": INPUT}, {}),
])
async def test_a_carried_thought_nested_past_the_parser_is_no_thought(serve, path, body, headers):
    s = await serve(["Fine."], model_id="m")
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=body, headers=headers)
    assert r.status_code == 200, r.text

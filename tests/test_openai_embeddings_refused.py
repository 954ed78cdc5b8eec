"""``POST /v1/embeddings``: this server has no embeddings model, and says so by name — a 501 in OpenAI's error
envelope, as Ollama's ``/api/embed`` is refused in Ollama's — never a bare 404 that reads as a wrong base URL."""

from __future__ import annotations

import httpx
import openai
import pytest


async def test_the_openai_sdk_is_told_embeddings_are_not_supported(serve):
    s = await serve(["x"])
    client = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        await client.embeddings.create(model="tinytitan-scripted", input="hi")
    assert caught.value.status_code == 501
    error = caught.value.body
    assert error["code"] == "not_implemented" and error["type"] == "invalid_request_error"
    assert error["message"].startswith("POST /v1/embeddings is not supported") and "embeddings" in error["message"]


async def test_the_anthropic_envelope_is_used_where_asked(serve):
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/v1/embeddings"), json={"input": "hi"}, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 501 and r.json()["type"] == "error" and "/v1/embeddings" in r.json()["error"]["message"]

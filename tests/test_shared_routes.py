"""Shared routes: health, the model list in both shapes, one model, unload, the root."""

from __future__ import annotations

import httpx

MODEL = "tinytitan-scripted"


async def get(s, path, headers=None):
    async with httpx.AsyncClient() as c:
        return await c.get(s.url(path), headers=headers)


async def test_health(serve):
    s = await serve(["ok"])
    r = await get(s, "/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok" and r.json()["model"] == MODEL and r.json()["queue_depth"] == 0
    assert r.headers["openai-version"] == "2020-10-01"


async def test_models_openai_shape(serve):
    s = await serve(["ok"])
    r = await get(s, "/v1/models")
    body = r.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [MODEL]  # -fast is accepted, not listed
    assert body["data"][0]["object"] == "model" and isinstance(body["data"][0]["created"], int)


async def test_models_anthropic_shape(serve):
    s = await serve(["ok"])
    r = await get(s, "/v1/models", headers={"anthropic-version": "2023-06-01"})
    body = r.json()
    assert body["has_more"] is False and body["first_id"] == MODEL and body["last_id"] == MODEL
    (m,) = body["data"]
    assert m["type"] == "model" and m["id"] == MODEL and m["display_name"] and m["created_at"].endswith("Z")


async def test_the_anthropic_model_list_pages_as_the_api_does(serve, demo_tok):
    """``limit``, ``after_id`` and ``before_id`` page the list (the SDK's auto-paging follows ``has_more``); a bad
    limit or an id that is not listed is the client's 400, naming it."""
    import anthropic

    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    names = ["m-a", "m-b", "m-c"]
    s = await serve(backend=[ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=n) for n in names])
    h = {"anthropic-version": "2023-06-01"}
    page = (await get(s, "/v1/models?limit=2", h)).json()
    assert [m["id"] for m in page["data"]] == names[:2] and page["has_more"] and page["last_id"] == "m-b"
    rest = (await get(s, "/v1/models?limit=2&after_id=m-b", h)).json()
    assert [m["id"] for m in rest["data"]] == ["m-c"] and not rest["has_more"]
    back = (await get(s, "/v1/models?limit=1&before_id=m-c", h)).json()
    assert [m["id"] for m in back["data"]] == ["m-b"] and back["has_more"]
    client = anthropic.AsyncAnthropic(base_url=s.url(""), api_key="x")
    assert [m.id async for m in client.models.list(limit=1)] == names
    for query, param in [("limit=0", "limit"), ("limit=x", "limit"), ("after_id=nope", "after_id")]:
        r = await get(s, f"/v1/models?{query}", h)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
        assert param in r.json()["error"]["message"]


async def test_one_model(serve):
    s = await serve(["ok"])
    assert (await get(s, f"/v1/models/{MODEL}")).json()["id"] == MODEL
    assert (await get(s, f"/v1/models/{MODEL}-fast")).json()["id"] == MODEL
    r = await get(s, "/v1/models/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


async def test_unload(serve, demo_backend):
    s = await serve(backend=demo_backend)
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/models/unload"), json={})
        assert r.status_code == 200 and r.json()["model"] == demo_backend.model_id
        r = await c.post(s.url("/v1/models/unload"), json={"model": "nope"})
        assert r.status_code == 404
        # the next request loads it again
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": demo_backend.model_id, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200


async def test_root(serve):
    s = await serve(["ok"])
    async with httpx.AsyncClient() as c:
        assert (await c.head(s.url("/"))).status_code == 200
        assert (await c.get(s.url("/"))).text == "Ollama is running"  # Ollama's answer (test_ollama_root.py)
        assert (await c.get(s.url("/"), headers={"accept": "application/json"})).json()["status"] == "ok"


async def test_the_anthropic_model_card_says_the_context_edits_messages_applies(serve):
    """Messages applies ``clear_tool_uses_20250919`` and takes ``clear_thinking_20251015`` (docs/protocols/index.md);
    ``compact_20260112`` is refused there. The model card in Anthropic's shape must say the same, in the SDK's
    ``ContextManagementCapability`` shape, not that context management is unsupported."""
    from anthropic.types import ModelInfo

    s = await serve(["ok"])
    card = (await get(s, f"/v1/models/{MODEL}", headers={"anthropic-version": "2023-06-01"})).json()
    cm = ModelInfo.model_validate(card).capabilities.context_management
    assert cm.supported is True
    assert cm.clear_tool_uses_20250919.supported and cm.clear_thinking_20251015.supported
    assert not cm.compact_20260112.supported
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"}, json={
            "model": MODEL, "max_tokens": 8, "tools": [{"name": "t", "input_schema": {"type": "object"}}],
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses",
                                                                                           "value": 0},
                                              "trigger": {"type": "input_tokens", "value": 1}}]},
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "t",
                                                            "input": {}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": "result"}]}]})
    assert r.status_code == 200, r.text
    assert r.json()["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 1


async def test_the_anthropic_model_card_lists_every_effort_messages_takes(serve):
    """``output_config.effort`` takes xhigh on Messages; the model card in Anthropic's shape (the SDK's
    ``EffortCapability``, whose ``xhigh`` is optional) must say so, or a client choosing the levels it offers from
    the card never offers xhigh."""
    from anthropic.types import ModelInfo

    s = await serve(["ok"])
    headers = {"anthropic-version": "2023-06-01"}
    effort = ModelInfo.model_validate((await get(s, f"/v1/models/{MODEL}", headers=headers)).json()).capabilities.effort
    assert effort.supported
    async with httpx.AsyncClient() as c:
        for level in ("low", "medium", "high", "xhigh", "max"):
            assert getattr(effort, level) is not None and getattr(effort, level).supported, level
            r = await c.post(s.url("/v1/messages"), headers=headers, json={
                "model": MODEL, "max_tokens": 8, "output_config": {"effort": level},
                "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200, r.text

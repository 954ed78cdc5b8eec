"""Ollama request fields as Ollama's own server reads them: the values it takes, and its words for the ones it
refuses (server/routes.go, api/types.go), which its clients match."""

from __future__ import annotations

import httpx
import pytest

from backends import Asked
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"

USER = [{"role": "user", "content": "hi"}]


async def post(s, body, path="/api/chat"):
    async with httpx.AsyncClient() as h:
        return await h.post(s.url(path), json={"model": MODEL, "stream": False, **body})


@pytest.mark.parametrize("level", ["low", "medium", "high", "max", True, False])
async def test_every_think_value_ollama_takes_is_taken(serve, demo_tok, level):
    """``max`` is one of Ollama's levels (validateLegacyThinking): it reads as the highest effort here."""
    backend = Asked([ScriptEntry("b")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await post(s, {"messages": USER, "think": level})
    assert r.status_code == 200, r.text
    assert backend.requests[-1].reasoning == level


@pytest.mark.parametrize("level", ["banana", "xhigh", "true"])
async def test_an_unknown_think_value_is_refused_in_ollamas_words(serve, level):
    """``ollama run`` and other clients look for "invalid think value" to retry without a level."""
    s = await serve(["x"])
    r = await post(s, {"messages": USER, "think": level})
    assert r.status_code == 400
    assert r.json() == {"error": f'invalid think value: "{level}" (must be "high", "medium", "low", "max", '
                                 'true, or false)'}


@pytest.mark.parametrize("model", ["", "  ", None, "absent"])
async def test_an_empty_model_is_refused_as_ollama_says(serve, model):
    """Ollama's ChatHandler and ShowHandler say "model is required" (400); its GenerateHandler, that the model is
    not found (404). Go decodes a model not sent as "", and trims the name before reading it."""
    s = await serve(["x"])
    named = {} if model == "absent" else {"model": model}
    async with httpx.AsyncClient() as h:
        chat = await h.post(s.url("/api/chat"), json={"stream": False, "messages": USER, **named})
        generate = await h.post(s.url("/api/generate"), json={"stream": False, "prompt": "x", **named})
        show = await h.post(s.url("/api/show"), json=named)
    assert chat.status_code == 400 and chat.json() == {"error": "model is required"}
    assert generate.status_code == 404 and "not found" in generate.json()["error"]
    assert show.status_code == 400 and show.json() == {"error": "model is required"}


@pytest.mark.parametrize("n", [-1, 21])
async def test_top_logprobs_out_of_range_in_ollamas_words(serve, n):
    s = await serve(["x"])
    r = await post(s, {"messages": USER, "top_logprobs": n})
    assert r.status_code == 400 and r.json() == {"error": "top_logprobs must be between 0 and 20"}


async def test_null_tool_fields_in_a_message_read_as_absent(serve, demo_tok):
    """Go clients (and Python ones dumping a model with ``None``s) send ``tool_calls: null``, ``tool_name: null``:
    Ollama decodes them as absent."""
    backend = Asked([ScriptEntry("ok")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await post(s, {"messages": [
        {"role": "user", "content": "hi", "tool_calls": None, "tool_name": None, "tool_call_id": None},
        {"role": "assistant", "content": "hello", "tool_calls": None},
        {"role": "user", "content": "again"}]})
    assert r.status_code == 200, r.text
    seen = backend.requests[-1].messages
    assert [m.role for m in seen] == ["user", "assistant", "user"] and seen[1].tool_calls == ()


async def test_null_fields_of_a_call_and_a_tool_read_as_absent(serve, demo_tok):
    """A call's ``id``, ``type`` and ``function.index``, and a tool's ``type``, sent as null (a client dumping an
    OpenAI-shaped call whose id it never had, a Rust or Go struct's empty option): Ollama decodes them as absent."""
    backend = Asked([ScriptEntry("ok")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    call = {"id": None, "type": None, "function": {"index": None, "name": "get_weather", "arguments": {"city": "Oslo"}}}
    r = await post(s, {"messages": USER + [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": None}],
        "tools": [{"type": None, "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})
    assert r.status_code == 200, r.text  # observed: 400 naming messages[1].tool_calls[0].id
    seen = backend.requests[-1]
    (sent,) = seen.messages[1].tool_calls
    assert sent.name == "get_weather" and sent.id and seen.messages[2].tool_call_id == sent.id
    assert [t.name for t in seen.tools] == ["get_weather"]


@pytest.mark.parametrize("path,body", [("/api/chat", {"messages": USER}), ("/api/generate", {"prompt": "hi"}),
                                       ("/api/chat", {})])  # (the last: a load request, refused as Ollama does)
@pytest.mark.parametrize("think", [True, "high"])
async def test_thinking_asked_of_a_model_that_does_not_think_is_refused_in_ollamas_words(serve, tmp_path, path,
                                                                                          body, think):
    """Ollama answers 400 ``"<model>" does not support thinking`` (server/routes.go); clients match those words
    and ask again without ``think``: never a silent answer without the thought they asked for."""
    import family_fixtures

    backend = family_fixtures.backend("llama3", tmp_path, outputs=("plain",))
    s = await serve(backend=backend)
    r = await post(s, {"model": "fixture-llama3", "think": think, **body}, path)
    assert r.status_code == 400, r.text
    assert r.json() == {"error": '"fixture-llama3" does not support thinking'}
    r = await post(s, {"model": "fixture-llama3", "think": False, **body}, path)
    assert r.status_code == 200, r.text


async def test_a_model_that_always_thinks_lists_thinking_and_takes_think(serve, tmp_path):
    """A template with thinking markup but no switch (MiniMax M2) thinks whatever is asked: Ollama
    lists ``thinking`` among its capabilities and takes ``think: true``."""
    import family_fixtures

    backend = family_fixtures.backend("minimax_m2", tmp_path, outputs=("<think>t</think>done",))
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as h:
        shown = await h.post(s.url("/api/show"), json={"model": "fixture-minimax_m2"})
    assert "thinking" in shown.json()["capabilities"]
    r = await post(s, {"model": "fixture-minimax_m2", "think": True, "messages": USER})
    assert r.status_code == 200, r.text


async def test_a_role_in_any_case_is_read_as_ollama_lowercases_it(serve, demo_tok):
    """Ollama's ``Message.UnmarshalJSON`` lowercases the role (api/types.go): ``"User"`` is a user turn there, never
    a 400; a role it does not know is still refused here, by name."""
    backend = Asked([ScriptEntry("ok")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await post(s, {"messages": [
        {"role": "SYSTEM", "content": "be brief"}, {"role": "User", "content": "hi"},
        {"role": "Assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
        {"role": "TOOL", "content": "42", "tool_name": "f"}]})
    assert r.status_code == 200, r.text
    assert [m.role for m in backend.requests[-1].messages] == ["system", "user", "assistant", "tool"]
    r = await post(s, {"messages": [{"role": "Narrator", "content": "hi"}]})
    assert r.status_code == 400 and "messages[0].role" in r.json()["error"]

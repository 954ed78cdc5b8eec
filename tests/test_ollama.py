"""Ollama's API, driven by the official ``ollama`` Python client (its pydantic models check every answer)
against a real server on the scripted backend: chat streamed and not, a tool round trip, generate, the
model routes, model names, and errors in Ollama's envelope."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import ollama
import pytest
import trio
from pydantic import BaseModel, ConfigDict

from backends import Asked, Recording
from tinytitan.engine.backends.scripted import SCRIPTED_CONTEXT_WINDOW, ScriptedBackend, ScriptEntry, demo_tokenizer

MODEL = "tinytitan-scripted"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def client(s) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=s.base)


async def test_text_before_and_after_a_call_reads_as_two_paragraphs(serve):
    """The text a model writes before and after a call is one content string here: joined by a paragraph break
    (the parser cut the layout around the call's markup), not run together, streamed or not."""
    raw = ('Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
           "\n\nDone.")
    s = await serve([raw, raw])
    c, msgs = client(s), [{"role": "user", "content": "Weather in Paris?"}]
    whole = await c.chat(model=MODEL, messages=msgs, tools=[WEATHER], stream=False)
    parts = [p async for p in await c.chat(model=MODEL, messages=msgs, tools=[WEATHER], stream=True)]
    assert whole.message.content == "".join(p.message.content for p in parts) == "Let me check.\n\nDone."
    assert [c.function.name for c in whole.message.tool_calls] == ["get_weather"]


async def test_chat_streamed_and_not_tell_the_same_answer(serve):
    s = await serve(["<think>Let me see.</think>Hello there, friend."])
    c = client(s)
    whole = await c.chat(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=False)
    parts = [p async for p in await c.chat(model=MODEL + ":latest", messages=[{"role": "user", "content": "hi"}],
                                              stream=True)]
    assert whole.message.content == "Hello there, friend." and whole.message.thinking == "Let me see."
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert "".join(p.message.thinking or "" for p in parts) == whole.message.thinking
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    last = parts[-1]
    for answer in (whole, last):
        assert answer.done_reason == "stop"
        assert answer.eval_count == whole.eval_count > 0 and answer.prompt_eval_count > 0
        parts = (answer.load_duration, answer.prompt_eval_duration, answer.eval_duration)
        assert all(p >= 0 for p in parts) and 0 < sum(parts) <= answer.total_duration
    assert whole.model == MODEL and last.model == MODEL + ":latest"  # the name as the client sent it


async def test_the_stream_is_ndjson(serve):
    s = await serve(["Hi."])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json={"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop" and r.text.endswith("}\n")


async def test_tool_round_trip(serve, demo_tok):
    backend = Recording([
        ScriptEntry('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
        ScriptEntry("It is sunny in Paris.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    c = client(s)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = await c.chat(model=MODEL, messages=messages, tools=[WEATHER], stream=False)
    (call,) = first.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    assert first.done_reason == "stop"
    messages += [first.message, {"role": "tool", "content": "sunny, 24 C", "tool_name": "get_weather"}]
    parts = [p async for p in await c.chat(model=MODEL, messages=messages, tools=[WEATHER], stream=True)]
    assert "".join(p.message.content for p in parts) == "It is sunny in Paris."
    # the call and its result reached the model's template, in order
    prompt = backend.prompts[-1]
    assert prompt.index('"name": "get_weather"') < prompt.index("<tool_response>\nsunny, 24 C\n</tool_response>")
    assert '"city": "Paris"' in prompt


async def test_a_streamed_tool_call_has_object_arguments(serve):
    s = await serve(['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'])
    parts = [p async for p in await client(s).chat(model=MODEL, messages=[{"role": "user", "content": "w"}],
                                                   tools=[WEATHER], stream=True)]
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", {"city": "Oslo"})]


async def test_generate(serve, demo_tok):
    backend = Recording([ScriptEntry("Once upon a time.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    c = client(s)
    r = await c.generate(model=MODEL, prompt="Tell a story", system="Be brief.", stream=False)
    assert r.response == "Once upon a time." and r.done and r.done_reason == "stop" and r.eval_count > 0
    assert "Be brief." in backend.prompts[-1] and "Tell a story" in backend.prompts[-1]
    parts = [p async for p in await c.generate(model=MODEL, prompt="<|im_start|>user\nraw<|im_end|>\n", raw=True,
                                               options={"num_predict": 2}, stream=True)]
    assert backend.prompts[-1] == "<|im_start|>user\nraw<|im_end|>\n"  # as written: no template
    assert parts[-1].done_reason == "length" and parts[-1].eval_count == 2
    loaded = await c.generate(model=MODEL)  # an empty prompt loads the model and answers at once
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""


async def test_a_chat_with_no_messages_loads_the_model(serve, demo_tok):
    """`ollama run` and `ollama.chat(model)` load a model with a chat of no messages (the Go client sends null):
    answered at once, nothing generated, as Ollama does. A model not served is still its 404."""
    backend = Recording([ScriptEntry("never read")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    loaded = await client(s).chat(model=MODEL)
    assert loaded.done and loaded.done_reason == "load" and loaded.message.content == ""
    async with httpx.AsyncClient() as h:
        for body in ({"messages": None}, {"messages": []}, {"messages": [], "keep_alive": 0, "stream": True}):
            r = await h.post(s.url("/api/chat"), json={"model": MODEL, **body})
            assert r.status_code == 200, (body, r.text)
            assert r.json()["message"] == {"role": "assistant", "content": ""} and r.json()["done_reason"] == "load"
        r = await h.post(s.url("/api/chat"), json={"model": "no-such-model", "messages": []})
        assert r.status_code == 404 and "no-such-model" in r.json()["error"]
    assert backend.prompts == []


async def test_generate_refuses_fill_in_the_middle_where_the_model_has_no_tokens_for_it(serve):
    s = await serve(["x"])
    with pytest.raises(ollama.ResponseError) as err:
        await client(s).generate(model=MODEL, prompt="def f(", suffix="    return x")
    assert err.value.status_code == 400 and "'suffix'" in err.value.error


async def test_a_suffix_without_a_prompt_is_refused_by_name_or_filled_in(serve):
    # "raw" + "suffix" and no "prompt": once a 500 (an empty conversation reached the chat template)
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        for body in ({"raw": True, "suffix": "x"}, {"suffix": "x"}, {"raw": True, "suffix": "x", "system": "s"}):
            r = await h.post(s.url("/api/generate"), json={"model": MODEL, "stream": False, **body})
            named = ("'suffix'", "'system'") if "system" in body else ("'suffix'",)  # raw + system: refused too
            assert r.status_code == 400 and any(n in r.json()["error"] for n in named), (body, r.text)
        r = await h.post(s.url("/api/generate"), json={"model": MODEL, "stream": False, "raw": True})
        assert r.status_code == 200 and r.json()["done_reason"] == "load"  # nothing to continue: a load
    tok = demo_tokenizer()  # a fresh copy with fill-in-the-middle tokens: the gap after an empty prefix
    tok.add_special_tokens({"additional_special_tokens": ["<|fim_prefix|>", "<|fim_suffix|>",
                                                                      "<|fim_middle|>"]})
    backend = Recording([ScriptEntry("def f():")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await client(s).generate(model=MODEL, raw=True, suffix="    return 1\n")
    assert r.response == "def f():" and backend.prompts == ["<|fim_prefix|><|fim_suffix|>    return 1\n<|fim_middle|>"]


async def test_model_routes(serve):
    s = await serve(["x"])
    c = client(s)
    (m,) = (await c.list()).models
    assert m.model == MODEL + ":latest" and m.details.family == "qwen" and m.details.format == "mlx"
    shown = await c.show(MODEL + ":latest")
    assert {"completion", "tools", "thinking"} <= set(shown.capabilities)
    arch = shown.modelinfo["general.architecture"]
    assert shown.modelinfo[f"{arch}.context_length"] == SCRIPTED_CONTEXT_WINDOW and "<|im_start|>" in shown.template
    (running,) = (await c.ps()).models
    assert running.model == MODEL + ":latest" and running.context_length == SCRIPTED_CONTEXT_WINDOW
    async with httpx.AsyncClient() as h:
        assert (await h.get(s.url("/api/version"))).json()["version"]
        assert (await h.head(s.url("/"))).status_code == 200
        legacy = await h.post(s.url("/api/show"), json={"name": MODEL})
        assert legacy.status_code == 200 and legacy.json()["details"]["family"] == "qwen"


@pytest.mark.parametrize("name", [MODEL + ":7b", "nope", "nope:latest"])
async def test_unknown_models_are_404(serve, name):
    s = await serve(["x"])
    c = client(s)
    for call in (c.chat(model=name, messages=[{"role": "user", "content": "x"}], stream=False),
                 c.generate(model=name, prompt="x", stream=False), c.show(name)):
        with pytest.raises(ollama.ResponseError) as err:
            await call
        assert err.value.status_code == 404 and name.split(":")[0] in err.value.error


# (body changes to a valid chat request, the status, what the error must name)
BAD = [
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}]}, 400,
     "'messages[0].tool_calls[0].function.name'"),
    ({"messages": [{"role": "robot", "content": "x"}]}, 400, "'messages[0].role'"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "'messages[0].content'"),
    ({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400, "messages[0].images"),
    ({"format": "yaml"}, 400, "'format'"),
    ({"format": {"type": "object", "properties": {"a": {"type": "text"}}}}, 400, "'format.properties.a.type'"),
    ({"options": {"temperature": "hot"}}, 400, "'options.temperature'"),
    ({"options": {"mirostat": 2}}, 400, "'options.mirostat'"),
    ({"options": {"warp_speed": 9}}, 400, "'options.warp_speed'"),
    ({"options": {"num_predict": -3}}, 400, "'options.num_predict'"),
    ({"think": "extreme"}, 400, "invalid think value"),  # (Ollama's words)
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, 400, "'tools[0].function.name'"),
    ({"stream_options": {}}, 400, "stream_options"),
]


@pytest.mark.parametrize("change,status,names", BAD, ids=range(len(BAD)))
async def test_errors_name_the_field_in_ollamas_envelope(serve, change, status, names):
    s = await serve(["x"])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": False, **change}
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json=body)
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and isinstance(r.json()["error"], str) and names in r.json()["error"]


async def test_routes_it_does_not_serve_are_refused_by_name(serve):
    s = await serve(["x"])
    async with httpx.AsyncClient() as h:
        pull = await h.post(s.url("/api/pull"), json={"model": "llama3"})
        nothing = await h.get(s.url("/api/nothing"))
    assert pull.status_code == 501 and "/api/pull" in pull.json()["error"]
    assert nothing.status_code == 404 and isinstance(nothing.json()["error"], str)


async def test_blob_routes_are_refused_by_name(serve, tmp_path):
    """``ollama create`` asks ``HEAD /api/blobs/<digest>`` whether a blob is there, then uploads it with
    ``POST``: both are 501, named, not a 404 that reads as "upload it"."""
    s = await serve(["x"])
    digest = "sha256:" + "ab" * 32
    async with httpx.AsyncClient() as h:
        head = await h.head(s.url(f"/api/blobs/{digest}"))
        post = await h.post(s.url(f"/api/blobs/{digest}"), content=b"GGUF....")
    assert head.status_code == 501 and head.content == b""
    assert post.status_code == 501 and f"/api/blobs/{digest}" in post.json()["error"]
    assert "not supported" in post.json()["error"]
    (tmp_path / "model.gguf").write_bytes(b"GGUF....")
    with pytest.raises(ollama.ResponseError) as err:  # the official client's upload
        await client(s).create_blob(tmp_path / "model.gguf")
    assert err.value.status_code == 501 and "/api/blobs/sha256:" in err.value.error


async def test_a_failure_after_the_stream_opened_is_an_error_line(serve):
    s = await serve([{"output": "partial answer", "error": "the model fell over"}])
    with pytest.raises(ollama.ResponseError) as err:
        async for _ in await client(s).chat(model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True):
            pass
    assert "fell over" in err.value.error
    assert (s.engine.running, s.engine.waiting) == (0, 0)


async def test_a_full_queue_is_503_at_once(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(" ".join(f"w{i}" for i in range(400)), delay_ms=20)], demo_tok)
    s = await serve(backend=backend, max_queue=0)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
    async with httpx.AsyncClient(timeout=30) as h:
        async with trio.open_nursery() as n:
            async def hold():
                async with h.stream("POST", s.url("/api/chat"), json=body) as r:
                    async for _ in r.aiter_bytes():
                        await trio.sleep_forever()  # hold the slot until the test ends

            n.start_soon(hold)
            while s.engine.running == 0:
                await trio.sleep(0.01)
            with trio.fail_after(5):  # at once: queued, it would wait out the held stream's 8 s and more of decoding
                r = await h.post(s.url("/api/chat"), json={**body, "stream": False})
            assert r.status_code == 503 and r.headers["retry-after"] == "1" and "--max-queue" in r.json()["error"]
            n.cancel_scope.cancel()


class City(BaseModel):
    model_config = ConfigDict(extra="forbid")  # no free keys: the demo model would write one forever
    name: Literal["Paris", "Oslo", "Lima"]
    sunny: bool


async def test_format_is_enforced(serve, demo_backend):
    """``format`` (a JSON schema, as the client's pydantic helpers send it, or "json") masks the sampler:
    the demo model's gibberish comes out as a valid document, streamed and not."""
    s = await serve(backend=demo_backend)
    c = client(s)
    r = await c.chat(model=demo_backend.model_id, messages=[{"role": "user", "content": "a city"}],
                     format=City.model_json_schema(), options={"temperature": 0, "num_predict": 64})
    assert r.done_reason == "stop" and isinstance(City.model_validate_json(r.message.content), City)
    parts = [p async for p in await c.generate(model=demo_backend.model_id, prompt="x", stream=True,
                                               format=City.model_json_schema(),
                                               options={"temperature": 0, "num_predict": 64})]
    assert parts[-1].done_reason == "stop", [(p.response, p.thinking) for p in parts]
    assert isinstance(City.model_validate_json("".join(p.response for p in parts)), City)
    r = await c.generate(model=demo_backend.model_id, prompt="x", format="json", options={"num_predict": 3})
    assert r.response.startswith("{")  # a whole object in 3 tokens ("{}"), or the start of one the cap cut
    assert isinstance(json.loads(r.response), dict) if r.done_reason == "stop" else r.done_reason == "length"


async def test_a_null_option_is_unset(serve):
    """The ``ollama`` client's ``model_dump(exclude_none=True)`` does not reach into an options dict built from
    settings that may be None: Ollama reads a null option as unset (``Options.FromMap`` skips it)."""
    s = await serve(["Hello."])
    r = await ollama.AsyncClient(host=s.base).chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                   options={"temperature": None, "mirostat": None, "num_predict": 8})
    assert r.message.content == "Hello."


async def test_num_predict_zero_is_no_cap(serve):
    """Ollama's runner stops at num_predict only where it is above 0 (``numPredict > 0 && …``): 0 caps nothing."""
    s = await serve(["One two three four."])
    r = await ollama.AsyncClient(host=s.base).chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                   options={"num_predict": 0})
    assert (r.message.content, r.done_reason) == ("One two three four.", "stop")


async def test_the_openai_style_settings_of_the_ai_sdks_ollama_provider_mean_what_they_say(serve, demo_tok):
    """ollama-ai-provider-v2 (the Vercel AI SDK's Ollama provider) sends ``tool_choice`` whenever tools are
    offered, and ``temperature`` / ``top_p`` / ``max_output_tokens`` at the top level. Ollama ignores them;
    here each means what it says, and a value in ``options`` wins."""
    backend = Asked([ScriptEntry('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                                     '</tool_call>'), ScriptEntry("Sunny."), ScriptEntry("Sunny.")],
                        demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    user = [{"role": "user", "content": "Weather in Paris?"}]
    body = {"model": MODEL, "messages": user, "stream": False, "think": False, "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"}, "temperature": 0.3, "top_p": 0.5,
            "max_output_tokens": 40}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/api/chat"), json=body)
        assert r.status_code == 200, r.text
        assert r.json()["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        req = backend.requests[-1]
        assert (req.tool_choice, req.tool_names) == ("required", ("get_weather",))
        assert (req.temperature, req.top_p, req.max_tokens) == (0.3, 0.5, 40)
        r = await c.post(s.url("/api/chat"), json={**body, "tool_choice": "none",
                                                   "options": {"temperature": 0.9, "num_predict": 12}})
        assert r.status_code == 200 and r.json()["message"]["content"] == "Sunny.", r.text
        req = backend.requests[-1]
        assert (req.tool_choice, req.temperature, req.top_p, req.max_tokens) == ("none", 0.9, 0.5, 12)
        r = await c.post(s.url("/api/chat"), json={**body, "tool_choice": "sometimes"})
        assert r.status_code == 400 and "tool_choice" in r.json()["error"], r.text
        prefill = user + [{"role": "assistant", "content": "It is"}]
        r = await c.post(s.url("/api/chat"), json={**body, "messages": prefill, "tool_choice": "required"})
        assert r.status_code == 400 and "tool_choice" in r.json()["error"], r.text
        r = await c.post(s.url("/api/generate"), json={"model": MODEL, "prompt": "hi", "tool_choice": "auto"})
        assert r.status_code == 400 and "tool_choice" in r.json()["error"], r.text


async def test_details_family_is_the_models_architecture(serve, demo_backend):
    """Ollama's ``details.family`` is the weights' architecture (its GGUF ``general.architecture``, the same value
    /api/show gives under ``model_info``): the demo model's config says qwen3, whatever call syntax it writes."""
    s = await serve(backend=demo_backend)
    async with httpx.AsyncClient(timeout=60) as h:
        (listed,) = (await h.get(s.url("/api/tags"))).json()["models"]
        shown = (await h.post(s.url("/api/show"), json={"model": listed["name"]})).json()
    for details in (listed["details"], shown["details"]):
        assert details["family"] == "qwen3" and details["families"] == ["qwen3"], details
    assert shown["model_info"]["general.architecture"] == "qwen3"

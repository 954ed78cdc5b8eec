"""Chat Completions end to end over real sockets: exact content from the scripted backend, the openai
SDK as the client, stream and non-stream agreeing, usage, stop strings, caps."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

import strict
from sse import parse_sse
from chat_helpers import MODEL, THINK_TEXT_TOOL, TOOLS, USER, client


async def post(s, body, **kw):
    async with httpx.AsyncClient(timeout=30) as c:
        return await c.post(s.url("/v1/chat/completions"), json=body, **kw)


async def test_text_reasoning_and_tool_call_non_stream(serve):
    s = await serve([THINK_TEXT_TOOL])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    msg = r.choices[0].message
    assert msg.content == "Let me check."
    assert msg.model_extra["reasoning_content"] == "The user wants weather.\n"
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = msg.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


async def test_stream_matches_non_stream(serve, demo_tok):
    s = await serve([THINK_TEXT_TOOL])
    c = client(s)
    folded = await c.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    stream = await c.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS, stream=True,
                                             stream_options={"include_usage": True})
    content, reasoning, args, names, finish, usage = "", "", {}, {}, None, None
    async for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            content += ch.delta.content or ""
            reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
            for tc in ch.delta.tool_calls or []:
                args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                if tc.function.name:
                    names[tc.index] = tc.function.name
            finish = ch.finish_reason or finish
    m = folded.choices[0].message
    assert content == m.content
    assert reasoning == m.model_extra["reasoning_content"]
    assert names == {0: m.tool_calls[0].function.name}
    assert args == {0: m.tool_calls[0].function.arguments}
    assert finish == folded.choices[0].finish_reason
    assert usage.model_dump() == folded.usage.model_dump()
    # usage is real: the completion is exactly the scripted text's tokens
    assert usage.completion_tokens == len(demo_tok.encode(THINK_TEXT_TOOL, add_special_tokens=False))


async def test_stream_wire_format(serve):
    s = await serve(["Hello there"])
    r = await post(s, {"model": MODEL, "messages": USER, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["openai-version"] == "2020-10-01"
    events = parse_sse(r.text)
    assert events[-1] == (None, "[DONE]")
    chunks = [d for _, d in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "Hello there"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)  # include_usage not asked for
    assert len({c["id"] for c in chunks}) == 1


CALL_ONLY = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("raw", [CALL_ONLY, "<think>\nWeather.\n</think>\n\n" + CALL_ONLY])
async def test_a_calls_only_stream_says_content_null_as_its_fold(serve, raw):
    """OpenAI's first chunk of an answer of calls alone is the role with content null and the call's start (its
    recorded streams); the SDK's accumulation of the stream then agrees with the message: content null."""
    s = await serve([raw, raw])
    body = {"model": MODEL, "messages": USER, "tools": TOOLS}
    folded = (await post(s, body)).json()["choices"][0]["message"]
    assert folded["content"] is None and folded["tool_calls"]
    chunks = [d for _, d in parse_sse((await post(s, {**body, "stream": True})).text)[:-1]]
    first = chunks[0]["choices"][0]["delta"]
    assert (first["role"], first["content"], first["refusal"]) == ("assistant", None, None)
    assert ("tool_calls" in first) == (raw == CALL_ONLY)  # (reasoning first: the role goes before it)
    assert all(c["choices"][0]["delta"].get("content") is None for c in chunks if c["choices"])
    async with client(s).chat.completions.stream(model=MODEL, messages=USER, tools=TOOLS) as stream:
        accumulated = (await stream.get_final_completion()).choices[0].message
    assert accumulated.content is None and accumulated.tool_calls[0].function.name == "get_weather"


NAMED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("choice,reason", [(NAMED, "stop"), ({"type": "function", "name": "get_weather"}, "stop"),
                                           ("required", "tool_calls"), ("auto", "tool_calls")])
async def test_a_call_forced_by_name_ends_stop_as_openais(serve, choice, reason):
    """OpenAI ends an answer to a tool_choice naming the function with finish_reason "stop", not "tool_calls"
    (its documented quirk; vLLM answers so too); "required" and "auto" end "tool_calls". Stream and fold agree."""
    s = await serve([CALL_ONLY, CALL_ONLY])
    body = {"model": MODEL, "messages": USER, "tools": TOOLS, "tool_choice": choice}
    r = (await post(s, body)).json()["choices"][0]
    assert r["finish_reason"] == reason and r["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    chunks = [d for _, d in parse_sse((await post(s, {**body, "stream": True})).text)[:-1]]
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]] == [reason]


AROUND_A_CALL = "Let me check.\n\n" + CALL_ONLY + "\n\nDone."


async def test_text_before_and_after_a_call_reads_as_two_paragraphs(serve):
    """The parser cuts the layout around a call's markup; Chat's content is one string, so the text the model
    wrote before and after the call is joined by a paragraph break (not "Let me check.Done."), the same in
    the stream as in its fold. Text after a call alone is not led by one."""
    s = await serve([AROUND_A_CALL, AROUND_A_CALL, CALL_ONLY + "\n\nDone."])
    body = {"model": MODEL, "messages": USER, "tools": TOOLS}
    folded = (await post(s, body)).json()["choices"][0]["message"]
    assert folded["content"] == "Let me check.\n\nDone." and len(folded["tool_calls"]) == 1
    async with client(s).chat.completions.stream(model=MODEL, messages=USER, tools=TOOLS) as stream:
        assert (await stream.get_final_completion()).choices[0].message.content == folded["content"]
    assert (await post(s, body)).json()["choices"][0]["message"]["content"] == "Done."


async def test_tool_round_trip_with_sdk(serve):
    s = await serve([THINK_TEXT_TOOL, "It is sunny in Paris."])
    c = client(s)
    first = await c.chat.completions.create(model=MODEL, messages=USER, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages = USER + [first.choices[0].message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24C"}]
    second = await c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is sunny in Paris."
    assert second.choices[0].finish_reason == "stop"
    # the tool result reached the prompt the model saw
    prepared = await s.engine.prepare(s.server.protocols["openai_chat"].chat_request(
        s.server.protocols["openai_chat"].validate(json.dumps({"model": MODEL, "messages": messages}).encode())))
    assert "sunny, 24C" in prepared.prompt_text and "<tool_response>" in prepared.prompt_text


async def test_developer_is_the_leading_system_turn(serve):
    s = await serve(["ok"])
    proto = s.server.protocols["openai_chat"]
    body = {"model": MODEL, "messages": [{"role": "developer", "content": "Be terse."},
                                         {"role": "system", "content": [{"type": "text", "text": "Use tools."}]},
                                         {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    req = proto.chat_request(proto.validate(json.dumps(body).encode()))
    assert [m.role for m in req.messages] == ["system", "user"]
    assert req.messages[0].content == "Be terse.\n\nUse tools."
    prepared = await s.engine.prepare(req)
    assert "developer" not in prepared.prompt_text
    assert prepared.prompt_text.startswith("<|im_start|>system\nBe terse.\n\nUse tools.")


@pytest.mark.parametrize("body, expected", [
    ({"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}}, False),
    ({"reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": False}}, True),
    ({"chat_template_kwargs": {"reasoning_effort": "low", "enable_thinking": False}}, True),
    ({"chat_template_kwargs": {"reasoning_effort": "none", "enable_thinking": True}}, False),
    ({"chat_template_kwargs": {"enable_thinking": False}}, False),
    ({"chat_template_kwargs": {"enable_thinking": True}}, True),
])
async def test_reasoning_precedence(serve, body, expected):
    s = await serve(["ok"])
    proto = s.server.protocols["openai_chat"]
    req = proto.chat_request(proto.validate(json.dumps({"model": MODEL, "messages": USER, **body}).encode()))
    prepared = await s.engine.prepare(req)
    thinking_off = prepared.prompt_text.endswith("<think>\n\n</think>\n\n")
    assert thinking_off != expected


async def test_stop_strings_and_finish_reason(serve):
    s = await serve(["alpha beta STOP gamma"])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, stop=["STOP", "zzz"])
    assert r.choices[0].message.content == "alpha beta "
    assert r.choices[0].finish_reason == "stop"


async def test_more_stop_sequences_than_openai_takes(serve):
    """OpenAI takes 4; a client cuts its list to 4 for api.openai.com only and sends a local server all of it."""
    s = await serve(["alpha beta STOP gamma"])
    stops = ["zz1", "zz2", "zz3", "zz4", "zz5", "STOP"]
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, stop=stops)
    assert r.choices[0].message.content == "alpha beta " and r.choices[0].finish_reason == "stop"


async def test_stop_string_across_token_boundaries_in_stream(serve):
    s = await serve(["one two three four"])
    r = await post(s, {"model": MODEL, "messages": USER, "stream": True, "stop": "o th"})
    chunks = [d for _, d in parse_sse(r.text)[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "one tw"


async def test_max_tokens_cuts_with_length(serve, demo_tok):
    s = await serve(["one two three four five six seven eight"])
    for field in ("max_tokens", "max_completion_tokens"):
        r = await client(s).chat.completions.create(model=MODEL, messages=USER, **{field: 3})
        assert r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == 3
        assert r.choices[0].message.content == demo_tok.decode(
            demo_tok.encode("one two three four five six seven eight", add_special_tokens=False)[:3])


async def test_two_different_output_caps_are_refused_as_openai_refuses_them(serve):
    """Neither cap is chosen over the other unseen: OpenAI answers a 400 of its own for the pair. The same cap
    sent under both names (nanobot's OpenAI-compatible provider sends it so, for old and new local servers
    alike) drops nothing, and is taken."""
    s = await serve(["one two three four five six seven eight"] * 2)
    for caps in ({"max_tokens": 3, "max_completion_tokens": 5}, {"max_tokens": 5, "max_completion_tokens": 3}):
        with pytest.raises(openai.BadRequestError) as e:
            await client(s).chat.completions.create(model=MODEL, messages=USER, **caps)
        assert e.value.code == "invalid_parameter_combination" and e.value.param == "max_tokens"
        assert e.value.body["message"].startswith(
            "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.")
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, max_tokens=4, max_completion_tokens=4)
    assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "length"
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, max_tokens=None, max_completion_tokens=2)
    assert r.usage.completion_tokens == 2  # null is absent: the one cap given holds


async def test_error_after_stream_opened_sends_error_then_done(serve):
    s = await serve([{"output": "partial answer", "error": "the model fell over"}])
    r = await post(s, {"model": MODEL, "messages": USER, "stream": True})
    events = parse_sse(r.text)
    assert events[-1] == (None, "[DONE]")
    err = events[-2][1]
    assert "the model fell over" in err["error"]["message"]
    # non-stream: the same failure is a 500 in the envelope, never a hang
    r = await post(s, {"model": MODEL, "messages": USER})
    assert r.status_code == 500 and "the model fell over" in r.json()["error"]["message"]


async def test_sampling_fields_reach_the_request(serve):
    s = await serve(["ok"])
    proto = s.server.protocols["openai_chat"]
    body = {"model": MODEL, "messages": USER, "seed": 7, "temperature": 0.2, "top_p": 0.9, "top_k": 40,
            "repetition_penalty": 1.1, "parallel_tool_calls": False, "user": "u1", "metadata": {"a": "b"}}
    req = proto.chat_request(proto.validate(json.dumps(body).encode()))
    assert (req.seed, req.temperature, req.top_p, req.top_k, req.repetition_penalty) == (7, 0.2, 0.9, 40, 1.1)
    assert req.parallel_tool_calls is False
    r = await post(s, body)
    assert r.status_code == 200


async def test_tool_choice_none_hides_tools(serve):
    s = await serve(["ok"])
    proto = s.server.protocols["openai_chat"]
    req = proto.chat_request(proto.validate(json.dumps(
        {"model": MODEL, "messages": USER, "tools": TOOLS, "tool_choice": "none"}).encode()))
    prepared = await s.engine.prepare(req)
    assert "get_weather" not in prepared.prompt_text


async def test_fast_model_strips_scaffolding(serve):
    s = await serve(["quick answer"])
    body = {"model": MODEL + "-fast", "tools": TOOLS,
            "messages": [{"role": "system", "content": "You are Claude Code. " * 200}] + USER}
    r = await post(s, body)
    assert r.status_code == 200
    assert r.json()["model"] == MODEL
    proto = s.server.protocols["openai_chat"]
    req = s.engine.apply_model(proto.chat_request(proto.validate(json.dumps(body).encode())))
    prepared = await s.engine.prepare(req)
    assert "Claude Code" not in prepared.prompt_text and "get_weather" not in prepared.prompt_text
    assert prepared.prompt_text.endswith("<think>\n\n</think>\n\n")


async def test_demo_model_real_mlx_path(serve, demo_backend, demo_tok):
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    c = client(s)
    r = await c.chat.completions.create(model=demo_backend.model_id, messages=USER, max_tokens=8, temperature=0,
                                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    prompt = demo_tok.apply_chat_template(USER, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert r.usage.prompt_tokens == len(demo_tok.encode(prompt, add_special_tokens=False))
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    stream = await c.chat.completions.create(model=demo_backend.model_id, messages=USER, max_tokens=8,
                                             temperature=0, stream=True, stream_options={"include_usage": True},
                                             extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
    # greedy: the same tokens both ways; the second request reuses the first one's cached prompt
    assert (usage.prompt_tokens, usage.completion_tokens) == (r.usage.prompt_tokens, r.usage.completion_tokens)
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1


async def test_any_integer_seed_on_the_real_mlx_path(serve, demo_backend):
    """OpenAI takes any int64 seed, negatives included; MLX takes an unsigned 64-bit one. Same seed, same
    sampled answer."""
    s = await serve(backend=demo_backend)
    c = client(s)
    answers = {}
    for seed in (-1, 2**64, 2**64 - 1, 7, 7):
        r = await c.chat.completions.create(model=demo_backend.model_id, messages=USER, max_tokens=6, seed=seed,
                                            temperature=1.0)
        answers.setdefault(seed, []).append(r.choices[0].message.content)
    assert answers[7][0] == answers[7][1]
    r = await post(s, {"model": demo_backend.model_id, "messages": USER, "max_tokens": 2, "seed": 1.5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed"


async def test_assistant_refusal_part_is_its_text(serve):
    s = await serve(["ok"])
    messages = [{"role": "user", "content": "do something bad"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
                {"role": "user", "content": "ok, something else"}]
    proto = s.server.protocols["openai_chat"]
    req = proto.chat_request(proto.validate(json.dumps({"model": MODEL, "messages": messages}).encode()))
    assert req.messages[1].content == "I can't help with that."
    # a refusal part is only an assistant's: from the user it is refused by name
    r = await post(s, {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[0].type"


@pytest.mark.parametrize("extra", [{}, {"tools": TOOLS, "tool_choice": "none"}])
async def test_no_tool_calls_the_client_did_not_offer(serve, extra):
    """With no tools declared (or tool_choice none), call markup the model writes anyway is text."""
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    s = await serve([raw])
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, **extra)
    msg = r.choices[0].message
    assert not msg.tool_calls and r.choices[0].finish_reason == "stop"
    assert msg.content == raw


async def test_metadata_of_any_shape_is_taken_as_local_servers_take_it(serve):
    """Chat's ``metadata`` is ignored, and taken whatever it holds: clients built for local servers send their
    own (LiteLLM's non-string values, Open WebUI's metadata filter with more than the API's 16 keys)."""
    s = await serve(["ok"])
    metadata = {"a": {"b": "c"}, "n": 1, "v": "x" * 513, **{f"k{i}": str(i) for i in range(24)}}
    r = await post(s, {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "metadata": metadata})
    assert r.status_code == 200, r.text
    strict.chat_completion(r.json())

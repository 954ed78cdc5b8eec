"""At most so many calls a turn, on every protocol: ``parallel_tool_calls: false`` (Chat, Responses),
Responses' ``max_tool_calls``, Anthropic's ``disable_parallel_tool_use`` (under ``auto`` too); and Anthropic's
``tools[].strict`` masked like OpenAI's strict tools.

The scripted backend writes three calls; the client sees only as many as the request allows, and nothing
after the last (engine/decode/call_limit.py). The grammar that ends a real model's turn after the last call is
checked on its own (the mask admits no further opening).
"""

from __future__ import annotations

import json

import pytest

import anthropic_util
from responses_helpers import client as responses_client, record_prompts
from chat_helpers import client as chat_client
from tinytitan.chat_request import ChatRequest, Message, Tool
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

MODEL = "tinytitan-scripted"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def call(city: str) -> str:
    """A call as the family's template writes it (Qwen: ``tojson``'s spacing), the layout a limit's mask holds
    the calls to (scripts are checked)."""
    return "<tool_call>\n" + json.dumps({"name": "weather", "arguments": {"city": city}}) + "\n</tool_call>"


THREE = call("Paris") + "\n" + call("Rome") + "\n" + call("Oslo") + "\nDone."


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("parallel,cities", [(False, ["Paris"]), (True, ["Paris", "Rome", "Oslo"])])
async def test_chat_completions(serve, stream, parallel, cities):
    s = await serve([THREE])
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "weather?"}], parallel_tool_calls=parallel,
              tools=[{"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}])
    if stream:
        calls, finish, text = {}, None, ""
        async for chunk in await chat_client(s).chat.completions.create(stream=True, **kw):
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    calls[tc.index] = calls.get(tc.index, "") + (tc.function.arguments or "")
        got = [json.loads(calls[i])["city"] for i in sorted(calls)]
    else:
        r = await chat_client(s).chat.completions.create(**kw)
        finish, text = r.choices[0].finish_reason, r.choices[0].message.content or ""
        got = [json.loads(tc.function.arguments)["city"] for tc in r.choices[0].message.tool_calls]
    assert got == cities and finish == "tool_calls"
    assert ("Done." in text) is parallel  # nothing after the last call allowed


@pytest.mark.parametrize("extra,cities", [({"parallel_tool_calls": False}, ["Paris"]),
                                          ({"max_tool_calls": 2}, ["Paris", "Rome"]),
                                          ({"max_tool_calls": 2, "parallel_tool_calls": False}, ["Paris"]),
                                          ({}, ["Paris", "Rome", "Oslo"])])
async def test_responses(serve, extra, cities):
    s = await serve([THREE])
    r = await responses_client(s).responses.create(
        model=MODEL, input="weather?", store=False, tools=[{"type": "function", "name": "weather", "parameters": SCHEMA}],
        **extra)
    calls = [o for o in r.output if o.type == "function_call"]
    assert [json.loads(c.arguments)["city"] for c in calls] == cities
    assert all(c.status == "completed" for c in calls) and r.status == "completed"
    if "max_tool_calls" in extra:
        assert r.max_tool_calls == extra["max_tool_calls"]  # echoed as sent


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice,cities", [({"type": "auto", "disable_parallel_tool_use": True}, ["Paris"]),
                                           ({"type": "auto"}, ["Paris", "Rome", "Oslo"])])
async def test_messages_disable_parallel_tool_use_under_auto(serve, stream, choice, cities):
    s = await serve([THREE])
    m = await anthropic_util.message(anthropic_util.sdk(s), stream, model=MODEL, max_tokens=500,
                                     messages=[{"role": "user", "content": "weather?"}], tool_choice=choice,
                                     tools=[{"name": "weather", "input_schema": SCHEMA}])
    assert [b.input["city"] for b in m.content if b.type == "tool_use"] == cities
    assert m.stop_reason == "tool_use"


async def test_messages_strict_tools_are_masked(serve):
    s = await serve(["Sunny.", "Sunny."])
    prompts = record_prompts(s)
    c = anthropic_util.sdk(s)
    for strict in (True, False):
        await c.messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "weather?"}],
                                tools=[{"name": "weather", "input_schema": SCHEMA, "strict": strict}])
    assert [p.req.tools[0].strict for p in prompts] == [True, False]
    assert prompts[0].grammar is not None and prompts[1].grammar is None  # a call once opened is held to the schema


def accepts(backend, req, text: str) -> bool:
    matcher = backend.prepare(req).grammar.matcher()
    ids = backend.tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_the_mask_admits_no_call_past_the_limit(demo_tok, choice):
    backend = ScriptedBackend([ScriptEntry("x")], demo_tok, model_id="m")
    base = ChatRequest("m", (Message("user", "weather?"),), (Tool("weather", parameters=SCHEMA),), tool_choice=choice)
    one, two, three = call("Paris"), call("Paris") + "\n" + call("Rome"), THREE.removesuffix("\nDone.")
    single = base.with_(parallel_tool_calls=False)
    assert accepts(backend, single, one) and not accepts(backend, single, two)
    capped = base.with_(max_tool_calls=2)
    assert accepts(backend, capped, one) and accepts(backend, capped, two) and not accepts(backend, capped, three)
    if choice == "auto":  # no limit, no strict tool: no mask at all
        assert backend.prepare(base).grammar is None
    else:
        assert accepts(backend, base, three)


@pytest.mark.parametrize("limit", [{"parallel_tool_calls": False}, {"max_tool_calls": 2}])
async def test_without_a_mask_the_decode_stops_after_the_last_call(serve, demo_tok, monkeypatch, limit):
    """A family whose call markup has no grammar here (simulated: the auto grammar is withheld) keeps the limit
    in the output parser alone: decoding stops once the last call allowed is complete — the tokens after it are
    never decoded, not decoded and dropped."""
    from tinytitan.engine.prompt import prepare as prepare_module

    monkeypatch.setattr(prepare_module, "auto_call_grammar", lambda *a, **k: None)
    backend = ScriptedBackend([ScriptEntry(THREE)], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await responses_client(s).responses.create(
        model=MODEL, input="weather?", store=False, **limit,
        tools=[{"type": "function", "name": "weather", "parameters": SCHEMA, "strict": False}])
    allowed = 1 if limit.get("parallel_tool_calls") is False else 2
    cities = [json.loads(item.arguments)["city"] for item in r.output if item.type == "function_call"]
    assert cities == ["Paris", "Rome"][:allowed]
    # decoded: at most the tokens of the calls allowed (the parser may see the last one complete before its
    # closing marker), never the rest of the script
    upto = len(demo_tok.encode("\n".join(call(c) for c in ["Paris", "Rome"][:allowed]), add_special_tokens=False))
    assert upto - 3 <= backend.tokens_decoded <= upto < len(demo_tok.encode(THREE, add_special_tokens=False))
    assert r.usage.output_tokens == backend.tokens_decoded


LIMITS = [{"parallel_tool_calls": False}, {"tool_choice": "required"}, {"strict": True}, {"max_tool_calls": 1}]


@pytest.mark.parametrize("limit", LIMITS, ids=lambda d: next(iter(d)))
@pytest.mark.parametrize("layout", ["template", "compact"])
async def test_a_call_in_the_templates_layout_is_served_under_every_limit(serve, limit, layout):
    """Chat and Responses, each grammar a limit brings: the call as the Qwen template writes it (``tojson``'s
    spacing) is served; compact JSON, which the mask does not let a model write, fails clearly (500, named)."""
    import openai

    args = {"city": "Paris"}
    text = json.dumps({"name": "weather", "arguments": args}, **({} if layout == "template" else
                                                                  {"separators": (",", ":")}))
    s = await serve([f"<tool_call>\n{text}\n</tool_call>"])
    strict = limit.get("strict", False)
    rest = {k: v for k, v in limit.items() if k != "strict"}
    chat_tools = [{"type": "function", "function": {"name": "weather", "parameters": SCHEMA, "strict": strict}}]
    resp_tools = [{"type": "function", "name": "weather", "parameters": SCHEMA, "strict": strict}]
    chat_kw = {k: v for k, v in rest.items() if k != "max_tool_calls"}  # (Responses only)
    if layout == "compact":
        if chat_kw or strict:  # (Chat has no max_tool_calls)
            with pytest.raises(openai.InternalServerError, match="does not fit the request's grammar"):
                await chat_client(s).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=chat_tools, **chat_kw)
        failed = await responses_client(s).responses.create(model=MODEL, input="weather?", store=False,
                                                            tools=resp_tools, **rest)
        assert failed.status == "failed" and "does not fit the request's grammar" in failed.error.message
        return
    r = await chat_client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "weather?"}],
                                                     tools=chat_tools, **chat_kw)
    assert [json.loads(c.function.arguments) for c in r.choices[0].message.tool_calls] == [args]
    out = await responses_client(s).responses.create(model=MODEL, input="weather?", store=False, tools=resp_tools,
                                                     **rest)
    assert [json.loads(o.arguments) for o in out.output if o.type == "function_call"] == [args]

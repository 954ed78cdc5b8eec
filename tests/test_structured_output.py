"""Structured output: three spellings, one keyword table, and a mask that enforces the schema.

The demo model has random weights: whatever validates, the grammar made valid. Every decoded document is
checked with ``jsonschema`` (2020-12, formats on); a document the output cap cut is reported as cut and is a
prefix the grammar accepts, never presented as complete.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Literal

import httpx
import jsonschema
import pytest
from pydantic import BaseModel, Field

import anthropic_util
from responses_helpers import client as responses_client
from structured_corpus import CORPUS
from tinytitan.chat_request import ChatRequest, Grammar, Message
from tinytitan.engine.decode.token_events import DecodeLoop
from tinytitan.errors import ApiError
from tinytitan.events import Finished, TextDelta
from tinytitan.output_format import REFUSED, normalise
from tinytitan.protocols.anthropic_messages import AnthropicMessages
from tinytitan.protocols.openai_chat import OpenAIChat
from tinytitan.protocols.openai_responses import OpenAIResponses

FORMATS = copy.deepcopy(jsonschema.Draft202012Validator.FORMAT_CHECKER)
# the two formats whose checkers jsonschema takes from packages not installed here (isoduration, fqdn)
_DURATION = re.compile(r"P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


@FORMATS.checks("duration")
def _is_duration(value) -> bool:
    return not isinstance(value, str) or bool(_DURATION.fullmatch(value))


@FORMATS.checks("hostname")
def _is_hostname(value) -> bool:
    return not isinstance(value, str) or (0 < len(value) <= 253 and all(_LABEL.fullmatch(p) for p in value.split(".")))


CAP = 200
# (temperature, seed): greedy, then two sampled runs
RUNS = [(0.0, 0), (1.0, 1), (1.0, 2)]


def decode(backend, schema: dict, temperature: float, seed: int, max_tokens: int = CAP) -> tuple[str, Finished, list]:
    req = ChatRequest(model=backend.model_id, messages=(Message("user", "Answer in JSON."),),
                      grammar=Grammar("json_schema", schema, where="schema"), max_tokens=max_tokens,
                      temperature=temperature, seed=seed)
    prepared = backend.prepare(req)
    events: list = []
    backend.decode(prepared, DecodeLoop(backend.parser(prepared), (), events.append), lambda: False)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    (finished,) = [e for e in events if isinstance(e, Finished)]
    return text, finished, prepared


def is_prefix(prepared, text: str) -> bool:
    """The grammar accepts ``text`` as the start of a document (a cut one is not garbage either)."""
    matcher = prepared.grammar.matcher()
    tokens = prepared.grammar.tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and not matcher.is_error()


def test_the_corpus_is_big_enough():
    assert len(CORPUS) >= 30


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_documents_validate_greedy_and_sampled(name, demo_backend):
    schema = CORPUS[name]
    completed = 0
    for temperature, seed in RUNS:
        text, finished, prepared = decode(demo_backend, schema, temperature, seed)
        if finished.reason == "stop":
            jsonschema.validate(json.loads(text), schema, format_checker=FORMATS)
            completed += 1
        else:  # only the cap may end a document early, and it is said
            assert finished.reason == "length" and finished.usage.completion_tokens == CAP, (finished, text)
            assert is_prefix(prepared, text), text
    assert completed, f"no run of {name} completed its document within {CAP} tokens"


def test_reasoning_is_off_and_logged(demo_backend, caplog):
    req = ChatRequest(model=demo_backend.model_id, messages=(Message("user", "x"),), reasoning="high",
                      grammar=Grammar("json_object", {"type": "object"}))
    with caplog.at_level("INFO", "tinytitan.backend"):
        prepared = demo_backend.prepare(req)
    assert prepared.req.reasoning is False and not prepared.start_in_reasoning
    assert any("reasoning off" in r.getMessage() and "high" in r.getMessage() for r in caplog.records)


# -- the three spellings, one form ---------------------------------------------------------------------------
SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}}, "required": ["title"],
          "additionalProperties": False}
SPELLINGS = {
    "chat": (OpenAIChat, {"model": "m", "messages": [{"role": "user", "content": "x"}]},
             lambda fmt: {"response_format": fmt}, "response_format"),
    "responses": (OpenAIResponses, {"model": "m", "input": "x"}, lambda fmt: {"text": {"format": fmt}}, "text.format"),
    "messages": (AnthropicMessages, {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
                 lambda fmt: {"output_config": {"format": fmt}}, "output_config.format"),
}
_PROTOCOLS: dict = {}


def proto(kind):
    cls = SPELLINGS[kind][0]
    if cls not in _PROTOCOLS:
        _PROTOCOLS[cls] = cls()
    return _PROTOCOLS[cls]


def request_of(kind: str, fmt: dict) -> ChatRequest:
    p = proto(kind)
    _, base, place, _ = SPELLINGS[kind]
    return p.chat_request(p.validator.validate({**base, **place(fmt)}))


def flat(schema: dict, chat: bool) -> dict:
    if chat:
        return {"type": "json_schema", "json_schema": {"name": "t", "strict": True, "schema": schema}}
    return {"type": "json_schema", "name": "t", "strict": True, "schema": schema}


@pytest.mark.parametrize("kind", SPELLINGS)
def test_three_spellings_make_one_grammar(kind):
    req = request_of(kind, flat(SCHEMA, kind == "chat"))
    assert req.grammar.kind == "json_schema" and req.grammar.source == SCHEMA
    assert req.grammar == normalise({"type": "json_schema", "schema": SCHEMA, "name": "t", "strict": True},
                                    SPELLINGS[kind][3] + (".json_schema" if kind == "chat" else ""))
    if kind != "messages":  # Messages takes json_schema only
        assert request_of(kind, {"type": "text"}).grammar is None
        assert request_of(kind, {"type": "json_object"}).grammar.kind == "json_object"
    assert request_of(kind, flat(SCHEMA, kind == "chat")).grammar.where.startswith(SPELLINGS[kind][3])


DESCRIBED = "A short title for the user's text, in their language."


async def test_a_formats_description_reaches_the_model_the_same_on_both_apis(serve, demo_tok):
    """OpenAI documents a json_schema format's description as "used by the model to determine how to respond
    in the format": it closes the system prompt, after the request's own system text, worded the same from Chat's
    response_format and Responses' text.format; a format without one adds nothing."""
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry('{"title":"Hi"}')] * 4, demo_tok, model_id="m")
    s = await serve(backend=backend)
    system = [{"role": "system", "content": "Be brief."}]
    fmt = {"type": "json_schema", "name": "t", "schema": SCHEMA, "description": DESCRIBED}
    async with httpx.AsyncClient(timeout=30) as c:
        for path, body in (("/v1/chat/completions", {"messages": [*system, {"role": "user", "content": "x"}],
                                                     "response_format": {"type": "json_schema", "json_schema": {
                                                         k: v for k, v in fmt.items() if k != "type"}}}),
                           ("/v1/responses", {"instructions": "Be brief.", "input": "x", "text": {"format": fmt}}),
                           ("/v1/responses", {"instructions": "Be brief.", "input": "x",
                                              "text": {"format": {k: v for k, v in fmt.items() if k != "description"}}})):
            r = await c.post(s.url(path), json={"model": "m", **body})
            assert r.status_code == 200, r.text
    note = f'Be brief.\n\nAnswer in the JSON format "t": {DESCRIBED}'
    assert note in backend.prompts[0] and note in backend.prompts[1]
    assert "Answer in the JSON format" not in backend.prompts[2] and "Be brief." in backend.prompts[2]


def test_the_older_messages_spelling_is_read_too():
    p = proto("messages")
    req = p.chat_request(p.validator.validate({**SPELLINGS["messages"][1],
                                               "output_format": {"type": "json_schema", "schema": SCHEMA}}))
    assert req.grammar.source == SCHEMA and req.grammar.where == "output_format.schema"


UNSUPPORTED = [({k: {"pattern": "^a"} if k == "propertyNames" else  # {} and {"type": "string"} constrain nothing
                 {} if k in ("not", "if", "then", "else", "contains", "contentSchema",
                                "unevaluatedProperties", "unevaluatedItems", "additionalItems")
                 else True if k == "uniqueItems" else "#x" if k.startswith("$") else
                 "base64" if k.startswith("content") else 1 if "Contains" in k else {}}, k) for k in REFUSED]
UNSUPPORTED += [({"frobnicate": 1}, "frobnicate"), ({"nullable": True}, "nullable"),
                ({"x-guidance": {"lenient": True}}, "x-guidance"),
                ({"$ref": "https://example.com/s.json"}, "$ref"), ({"format": "uri"}, "format"),
                ({"type": "integer", "format": "int32"}, "format")]


@pytest.mark.parametrize("kind", SPELLINGS)
@pytest.mark.parametrize("keyword_schema,keyword", UNSUPPORTED, ids=[k for _, k in UNSUPPORTED])
def test_unsupported_keywords_are_refused_by_name(kind, keyword_schema, keyword):
    """Nested under a property, so the path is named too; a strict format is never loosened (one that is not
    strict: test_loose_output_formats.py)."""
    schema = {"type": "object", "properties": {"a": keyword_schema}}
    with pytest.raises(ApiError) as exc:
        request_of(kind, flat(schema, kind == "chat"))
    status, envelope = proto(kind).error_response(exc.value)
    assert status == 400
    message = envelope["error"]["message"]
    assert f"'{keyword}'" in message or json.dumps(keyword_schema[keyword]) in message, message
    assert f"schema.properties.a.{keyword}" in message and exc.value.param.endswith(f"properties.a.{keyword}")


# -- over HTTP, on each protocol -----------------------------------------------------------------------------
async def chat_post(s, body):
    async with httpx.AsyncClient(timeout=60) as c:
        return await c.post(s.url("/v1/chat/completions"), json=body)


@pytest.mark.parametrize("kind", SPELLINGS)
async def test_what_the_compiler_cannot_promise_is_refused_by_name(serve, kind):
    """A look-around in a pattern passes the keyword table; the grammar compiler refuses it, named, as a 400
    in the protocol's own envelope before any stream opens."""
    s = await serve(["never generated"])
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)y"}}}
    _, base, place, field = SPELLINGS[kind]
    path = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[kind]
    body = {**base, **place(flat(schema, kind == "chat")), "model": "tinytitan-scripted", "stream": True}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=body, headers=anthropic_util.HEADERS if kind == "messages" else None)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "look-around" in message and field in message, message


class Step(BaseModel):
    explanation: str = Field(max_length=20)
    output: str = Field(max_length=20)


class Answer(BaseModel):
    steps: list[Step] = Field(max_length=2)
    final_answer: str = Field(max_length=20)
    confident: bool


async def test_chat_completions_parse(serve, demo_backend):
    from chat_helpers import client

    s = await serve(backend=demo_backend)
    r = await client(s).chat.completions.parse(model=demo_backend.model_id, temperature=0, max_tokens=CAP,
                                               messages=[{"role": "user", "content": "Solve 8x + 7 = -23"}],
                                               response_format=Answer)
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, Answer)
    assert choice.message.parsed == Answer.model_validate_json(choice.message.content)


async def test_responses_parse(serve, demo_backend):
    s = await serve(backend=demo_backend)
    r = await responses_client(s).responses.parse(model=demo_backend.model_id, input="Solve 8x + 7 = -23",
                                                   temperature=0, max_output_tokens=CAP, text_format=Answer)
    assert r.status == "completed"
    assert isinstance(r.output_parsed, Answer)
    assert r.text.format.type == "json_schema"


class Verdict(BaseModel):
    """The Anthropic SDK moves length bounds into descriptions (its API takes none): no free strings here."""
    choice: Literal["yes", "no", "maybe"]
    confident: bool
    score: Literal[1, 2, 3]


async def test_messages_parse(serve, demo_backend):
    s = await serve(backend=demo_backend)
    r = await anthropic_util.sdk(s).messages.parse(model=demo_backend.model_id, max_tokens=CAP, extra_body={"temperature": 0},
                                                   messages=[{"role": "user", "content": "Solve 8x + 7 = -23"}],
                                                   output_format=Verdict)
    assert r.stop_reason == "end_turn"
    assert isinstance(r.parsed_output, Verdict)


async def test_json_object_streams_an_object(serve, demo_backend):
    from chat_helpers import client

    s = await serve(backend=demo_backend)
    stream = await client(s).chat.completions.create(
        model=demo_backend.model_id, messages=[{"role": "user", "content": "x"}], stream=True, temperature=1,
        seed=3, max_tokens=CAP, response_format={"type": "json_object"})
    text, finish = "", None
    async for chunk in stream:
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert finish == "stop", text
    assert isinstance(json.loads(text), dict)


CODEX_TITLE_SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"],
                      "additionalProperties": False}


async def test_the_codex_title_request_is_answered(serve, demo_backend):
    """Codex names an interactive session with a streamed json_schema request: strict, no tools."""
    from responses_helpers import sse_events

    s = await serve(backend=demo_backend)
    body = {"model": demo_backend.model_id, "instructions": "Generate a short title for this session.",
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}],
            "tools": [], "tool_choice": "auto", "parallel_tool_calls": False, "store": False, "stream": True,
            "include": [], "prompt_cache_key": "019a-session", "temperature": 0, "max_output_tokens": CAP,
            "text": {"format": {"type": "json_schema", "name": "session_title", "strict": True,
                                "schema": CODEX_TITLE_SCHEMA}}}
    events = await sse_events(s, body)
    done = [d for name, d in events if name == "response.output_text.done"]
    assert events[-1][0] == "response.completed", events[-1]
    jsonschema.validate(json.loads(done[0]["text"]), CODEX_TITLE_SCHEMA)
    assert events[-1][1]["response"]["text"]["format"]["name"] == "session_title"


async def test_responses_echoes_the_reasoning_effort_used(serve, demo_backend):
    """Structured output decodes with reasoning off: the Responses object (the one protocol whose body has a
    place for the level) says ``effort: "none"``, not the level asked for; a plain request echoes its own.
    Messages and Chat Completions have no such field: the log says it there."""
    from responses_helpers import sse_events

    import strict

    s = await serve(backend=demo_backend)
    body = {"model": demo_backend.model_id, "input": "x", "temperature": 0, "max_output_tokens": CAP,
            "reasoning": {"effort": "high"}}
    async with httpx.AsyncClient(timeout=60) as h:
        plain = await h.post(s.url("/v1/responses"), json={**body, "max_output_tokens": 4})
        shaped = await h.post(s.url("/v1/responses"), json={**body, "text": {"format": flat(CODEX_TITLE_SCHEMA, False)}})
    assert strict.response(plain.json()).reasoning.effort == "high"
    r = strict.response(shaped.json())
    assert r.status == "completed" and r.reasoning.effort == "none"
    jsonschema.validate(json.loads(r.output_text), CODEX_TITLE_SCHEMA)
    events = strict.sse_events("responses", await sse_events(s, {**body, "stream": True,
                                                                  "text": {"format": {"type": "json_object"}}}))
    echoed = [d["response"]["reasoning"]["effort"] for _, d in events if "response" in d]
    assert echoed and set(echoed) == {"none"}, echoed


# a string that cannot end in 3 tokens: the cap cuts the document
LONG = {"type": "object", "properties": {"s": {"type": "string", "minLength": 40}}, "required": ["s"]}


async def test_a_cut_document_is_reported_as_cut_on_each_protocol(serve, demo_backend):
    from chat_helpers import client

    s = await serve(backend=demo_backend)
    model = demo_backend.model_id
    user = [{"role": "user", "content": "x"}]
    r = await client(s).chat.completions.create(model=model, messages=user, max_tokens=3,
                                                response_format=flat(LONG, True))
    assert r.choices[0].finish_reason == "length"
    resp = await responses_client(s).responses.create(model=model, input="x", max_output_tokens=3,
                                                      text={"format": flat(LONG, False)})
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    msg = await anthropic_util.sdk(s).messages.create(model=model, max_tokens=3, messages=user,
                                                      output_config={"format": {"type": "json_schema",
                                                                                "schema": LONG}})
    assert msg.stop_reason == "max_tokens"


async def test_requests_decoding_together_each_keep_their_own_schema(serve, demo_backend):
    """Inside a batch, each member is masked by its own grammar (a per-request logits processor)."""
    import trio

    from chat_helpers import client

    s = await serve(backend=demo_backend)
    names = ["flat_object", "enum_strings", "prefix_items", "ref_defs"]
    results: dict[str, str] = {}

    async def one(name: str) -> None:
        r = await client(s).chat.completions.create(
            model=demo_backend.model_id, messages=[{"role": "user", "content": name}], max_tokens=CAP,
            temperature=1, seed=7, response_format=flat(CORPUS[name], True))
        assert r.choices[0].finish_reason == "stop", r
        results[name] = r.choices[0].message.content

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(one, name)
    for name in names:
        jsonschema.validate(json.loads(results[name]), CORPUS[name], format_checker=FORMATS)


def test_harmony_answers_are_the_final_channels_document(tmp_path):
    """gpt-oss writes its answer inside harmony channel markup: the grammar starts at the final channel's
    marker and holds its message to the schema; random documents of it (what a random-weight model writes
    under the mask) are read back by the family's parser as text that validates."""
    import random

    import family_fixtures as ff
    from grammar_walk import random_document

    backend = ff.backend("gpt_oss", tmp_path)
    schema = CORPUS["nested_object"]
    req = ChatRequest(model=backend.model_id, messages=(Message("user", "x"),),
                      grammar=Grammar("json_schema", schema, where="response_format"))
    compiled = backend.prepare(req).grammar
    rng, hf = random.Random(7), backend.tokenizer
    for _ in range(10):
        raw = hf.decode(random_document(compiled, rng, set(backend.tokenizer.eos_token_ids)), skip_special_tokens=False)
        assert raw.startswith("<|channel|>final<|message|>"), raw
        events = ff.generate(ff.backend("gpt_oss", tmp_path, [raw]), req.with_(grammar=None))
        text = "".join(e.text for e in events if type(e).__name__ == "TextDelta")
        jsonschema.validate(json.loads(text), schema, format_checker=FORMATS)


WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}


@pytest.mark.parametrize("said,kind", [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "function_call"),
    ('{"answer":"sunny"}', "message")])  # (a document is written compact)
async def test_an_output_format_beside_tools_under_auto_keeps_the_tools_callable(serve, said, kind):
    """An agent SDK's typed output with tools (OpenAI Agents' ``Agent(output_type=…, tools=[…])``): the answer
    is the document or a call. Before, only the document was admitted: a model could never call a tool."""
    s = await serve([said])
    r = await responses_client(s).responses.create(
        model="tinytitan-scripted", input="The weather in Paris?", tools=[WEATHER], tool_choice="auto",
        text={"format": {"type": "json_schema", "name": "answer", "schema": ANSWER, "strict": True}})
    assert r.status == "completed" and [o.type for o in r.output] == [kind]
    if kind == "message":
        assert json.loads(r.output_text) == {"answer": "sunny"}
    else:
        assert json.loads(r.output[0].arguments) == {"city": "Paris"}


def test_the_document_or_a_call_is_all_the_demo_model_can_write(demo_backend):
    """On a real model (the demo's random weights, where the grammar alone decides) every answer is either a
    document of the schema or calls of the tool with its arguments."""
    from tinytitan.chat_request import Tool
    from tinytitan.events import ToolCallDone, ToolCallStarted

    for seed in range(6):
        req = ChatRequest(model=demo_backend.model_id, messages=(Message("user", "The weather?"),), seed=seed,
                          temperature=1.0, max_tokens=120, tool_choice="auto",
                          tools=(Tool("get_weather", "", WEATHER["parameters"], strict=True),),
                          grammar=Grammar("json_schema", ANSWER, "answer"))
        prepared = demo_backend.prepare(req)
        events: list = []
        demo_backend.decode(prepared, DecodeLoop(demo_backend.parser(prepared), (), events.append), lambda: False)
        (finished,) = [e for e in events if isinstance(e, Finished)]
        calls = [e for e in events if isinstance(e, ToolCallDone)]
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        if calls:
            assert not text.strip() and finished.reason in ("tool_calls", "length"), (text, finished)
            assert {e.name for e in events if isinstance(e, ToolCallStarted)} == {"get_weather"}
            for call in calls:
                if call.complete:
                    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
        elif finished.reason == "stop":
            jsonschema.validate(json.loads(text), ANSWER)
        else:  # cut at the cap: what came is the start of a document, or of a call (given back as text)
            assert finished.reason == "length" and text.startswith(("{", "<tool_call>")), (text, finished)


def test_a_forced_calls_arguments_are_an_object_when_its_schema_names_no_type(demo_backend):
    """Parameters given as ``{"properties": …, "required": …}`` without ``"type": "object"`` admit any JSON value
    by the letter of JSON Schema: the demo model's forced calls came back with arguments true, null or []. A
    call's arguments are an object, whatever its schema leaves out."""
    from tinytitan.chat_request import Tool
    from tinytitan.events import ToolCallDone

    params = {"properties": {"a": {"type": "integer"}}, "required": ["a"]}
    seen = 0
    for seed in range(1, 7):
        req = ChatRequest(model=demo_backend.model_id, messages=(Message("user", "x"),), seed=seed, temperature=1.0,
                          max_tokens=40, tool_choice="required", parallel_tool_calls=False,
                          tools=(Tool("f", "", params),))
        prepared = demo_backend.prepare(req)
        events: list = []
        demo_backend.decode(prepared, DecodeLoop(demo_backend.parser(prepared), (), events.append), lambda: False)
        for call in (e for e in events if isinstance(e, ToolCallDone) and e.complete):
            seen += 1
            assert isinstance(json.loads(call.arguments), dict), call.arguments
    assert seen  # (some seeds finish a call within the cap)


@pytest.mark.parametrize("bound", [0, -2])
def test_a_multiple_of_that_is_not_positive_is_an_invalid_schema(bound):
    """JSON Schema's multipleOf is greater than 0: a schema with another is the client's 400, not a grammar that
    admits what it likes."""
    with pytest.raises(ApiError) as err:
        normalise({"type": "json_schema", "name": "n", "schema": {"type": "number", "multipleOf": bound}}, "text.format")
    assert err.value.param == "text.format.schema.multipleOf" and err.value.code == "invalid_schema"


def test_llama_cpps_schema_spelling_on_chat_is_enforced():
    """llama.cpp's ``{"type": "json_object", "schema": …}``, which its clients send to Chat: the schema is the
    grammar (never dropped for any object)."""
    req = request_of("chat", {"type": "json_object", "schema": SCHEMA})
    assert req.grammar.kind == "json_schema" and req.grammar.source == SCHEMA


@pytest.mark.parametrize("schema", [{}, None])
def test_llama_cpps_spelling_with_an_empty_schema_is_any_object(schema):
    """llama.cpp reads an empty (or null) schema as none: 'any object', never any JSON value, never a 400."""
    req = request_of("chat", {"type": "json_object", "schema": schema})
    assert req.grammar.kind == "json_object" and req.grammar.source == {"type": "object"}, req.grammar

"""Forced tool choice, enforced by a grammar over the family's own call markup: with the random-weight demo
model, every answer is a call to an allowed tool whose arguments validate against its schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

import anthropic_util
from responses_helpers import client as responses_client
from chat_helpers import client as chat_client
from grammar_walk import random_document, random_document_from
from record_asking_tool import load_record_asking

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
           "required": ["city"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                                        "b": {"type": "integer", "minimum": 0, "maximum": 99}},
       "required": ["a", "b"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
SAMPLING = [{"temperature": 0}, {"temperature": 1, "seed": 1}, {"temperature": 1, "seed": 2}]


def check(calls: list[tuple[str, str]], allowed: set[str], single: bool) -> None:
    assert calls, "no call was made"
    if single:
        assert len(calls) == 1, calls
    for name, arguments in calls:
        assert name in allowed, (name, allowed)
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in SCHEMAS.items()]
CHAT_CHOICES = [
    ("required", set(SCHEMAS), False),
    ({"type": "function", "function": {"name": "add"}}, {"add"}, False),
    ({"type": "function", "name": "get_weather"}, {"get_weather"}, False),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [{"type": "function",
                                                                                 "function": {"name": "add"}}]}},
     {"add"}, True),
]


@pytest.mark.parametrize("choice,allowed,single", CHAT_CHOICES, ids=["required", "named", "named-flat", "allowed"])
async def test_chat_completions(serve, demo_backend, choice, allowed, single):
    s = await serve(backend=demo_backend)
    for sampling in SAMPLING:
        r = await chat_client(s).chat.completions.create(
            model=demo_backend.model_id, messages=USER, tools=CHAT_TOOLS, tool_choice=choice, max_tokens=120,
            parallel_tool_calls=not single, **sampling)
        choice0 = r.choices[0]
        assert choice0.finish_reason == ("tool_calls" if choice in ("required",) or "allowed_tools" in choice
                                         else "stop"), choice0  # a call forced by name ends "stop", as OpenAI's
        check([(c.function.name, c.function.arguments) for c in choice0.message.tool_calls], allowed, single)


RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": s, "strict": True} for n, s in SCHEMAS.items()]
RESPONSES_CHOICES = [
    ("required", set(SCHEMAS), True),
    ({"type": "function", "name": "get_weather"}, {"get_weather"}, False),
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "add"}]}, {"add"}, False),
]


@pytest.mark.parametrize("choice,allowed,single", RESPONSES_CHOICES, ids=["required", "named", "allowed"])
async def test_responses(serve, demo_backend, choice, allowed, single):
    s = await serve(backend=demo_backend)
    for sampling in SAMPLING:
        r = await responses_client(s).responses.create(
            model=demo_backend.model_id, input="weather?", tools=RESPONSES_TOOLS, tool_choice=choice,
            max_output_tokens=120, parallel_tool_calls=not single, store=False,
            temperature=sampling["temperature"], extra_body={"seed": sampling.get("seed")})
        assert r.status == "completed"
        calls = [(item.name, item.arguments) for item in r.output if item.type == "function_call"]
        assert all(item.status == "completed" for item in r.output if item.type == "function_call")
        check(calls, allowed, single)


MESSAGES_TOOLS = [{"name": n, "input_schema": s} for n, s in SCHEMAS.items()]
MESSAGES_CHOICES = [
    ({"type": "any"}, set(SCHEMAS), False),
    ({"type": "tool", "name": "add"}, {"add"}, False),
    ({"type": "any", "disable_parallel_tool_use": True}, set(SCHEMAS), True),
]


@pytest.mark.parametrize("choice,allowed,single", MESSAGES_CHOICES, ids=["any", "tool", "any-one"])
async def test_messages(serve, demo_backend, choice, allowed, single):
    s = await serve(backend=demo_backend)
    # Messages takes no seed: unseeded sampling only where one call is enforced (so it cannot run into the cap)
    for sampling in SAMPLING[:2] if single else SAMPLING[:1]:
        msg = await anthropic_util.sdk(s).messages.create(model=demo_backend.model_id, max_tokens=120, messages=USER,
                                                          tools=MESSAGES_TOOLS, tool_choice=choice,
                                                          extra_body={"temperature": sampling["temperature"]})
        assert msg.stop_reason == "tool_use", msg
        check([(b.name, json.dumps(b.input)) for b in msg.content if b.type == "tool_use"], allowed, single)


async def test_a_strict_tool_schema_the_grammar_cannot_promise_is_refused_by_name(serve):
    s = await serve(["never generated"])
    tools = [{"type": "function", "function": {"name": "tag", "strict": True, "parameters": {
        "type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}}}]
    async with __import__("httpx").AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/chat/completions"), json={
            "model": "tinytitan-scripted", "messages": USER, "tools": tools, "tool_choice": "required"})
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "'uniqueItems'" in message and "tag" in message, message


LINK = {"type": "object", "properties": {"url": {"type": "string", "format": "uri", "maxLength": 20},
                                         "tags": {"type": "array", "uniqueItems": True, "maxItems": 2,
                                                  "items": {"type": "string", "maxLength": 8}}},
        "required": ["url", "tags"], "additionalProperties": False}


async def test_a_forced_call_to_a_tool_that_is_not_strict_leaves_what_the_grammar_cannot_promise(serve,
                                                                                                  demo_backend):
    """OpenAI holds a tool that is not strict to no schema and takes it under any tool_choice; LangChain's
    function_calling structured output and the AI SDK's generateObject on Messages force such a tool, and zod's
    z.url() writes format "uri". The call is made, held to everything else its schema says."""
    s = await serve(backend=demo_backend)
    tools = [{"type": "function", "function": {"name": "save_link", "parameters": LINK}}]
    r = await chat_client(s).chat.completions.create(
        model=demo_backend.model_id, messages=USER, tools=tools, tool_choice="required", max_tokens=120,
        temperature=0)
    (call,) = r.choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name == "save_link" and set(args) == {"url", "tags"}, args
    assert isinstance(args["url"], str) and len(args["url"]) <= 20 and len(args["tags"]) <= 2, args
    msg = await anthropic_util.message(
        anthropic_util.sdk(s), False, model=demo_backend.model_id, max_tokens=120, messages=USER,
        tool_choice={"type": "any"}, extra_body={"temperature": 0},
        tools=[{"name": "save_link", "input_schema": LINK}])
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "save_link" and set(use.input) == {"url", "tags"}, use


def test_loosened_takes_every_value_the_schema_takes():
    from tinytitan.output_format import check_schema, loosened

    schema = {"type": "object", "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False,
              "properties": {"when": {"type": "string", "format": "date"}, "site": {"format": "uri", "not": {}},
                             "pair": {"type": "array", "items": [{"type": "string", "uniqueItems": True}],
                                      "additionalItems": {"if": {}, "type": "integer"}}}}
    assert loosened(schema) == {"type": "object", "properties": {
        "when": {"type": "string", "format": "date"}, "site": {},
        "pair": {"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "integer"}}}}
    check_schema(loosened(schema), "tools.f.parameters")  # what is left, the grammar promises


def test_loosened_leaves_no_reference_to_what_it_left_out():
    """A ``$ref`` to a schema under a keyword left out (an OpenAPI document's ``components``, a ``not``), or one
    the grammar cannot follow (another document, an anchor), goes with it: its subschema then takes any value,
    as the API takes such a tool's arguments, rather than a grammar that cannot compile. So does a hint of
    another shape (Swagger 2's discriminator, a property name)."""
    from tinytitan.output_format import check_schema, loosened

    schema = {"type": "object", "components": {"schemas": {"A": {"type": "string"}}}, "not": {"type": "integer"},
              "discriminator": "kind", "$defs": {"B": {"type": "string", "format": "uri"}},
              "properties": {"a": {"$ref": "#/components/schemas/A"}, "n": {"$ref": "#/not", "title": "N"},
                             "b": {"$ref": "#/$defs/B"}, "r": {"$ref": "https://example.com/s.json"},
                             "h": {"$ref": "#anchor"}, "c": {"const": {"$ref": "#/nowhere"}}}}
    assert loosened(schema) == {"type": "object", "$defs": {"B": {"type": "string"}}, "properties": {
        "a": {}, "n": {"title": "N"}, "b": {"$ref": "#/$defs/B"}, "r": {}, "h": {},
        "c": {"const": {"$ref": "#/nowhere"}}}}
    check_schema(loosened(schema), "tools.f.parameters")


# -- other call markups: the grammar's every document is a call the family's own parser reads back ----------
@pytest.fixture(scope="module")
def fixtures_root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.mark.parametrize("form", ["named", "json list"])
@pytest.mark.parametrize("parallel", [True, False])
def test_mistral_calls_are_forced_in_its_own_markup(fixtures_root, form, parallel):
    """Mistral writes ``[TOOL_CALLS]NAME[ARGS]{…}`` (tokenizers with an ``[ARGS]`` token) or
    ``[TOOL_CALLS][{"name": …, "arguments": {…}}]``: the forced-call grammar admits exactly calls in that
    markup, which the family's parser reads back as calls to the allowed tools with valid arguments."""
    import random

    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool
    from tinytitan.engine.structured import compile_grammar
    from tinytitan.engine.structured.tool_calls import forced_call_grammar

    tools = (Tool("get_weather", parameters=WEATHER), Tool("add", parameters=ADD))
    backend = ff.backend("mistral", fixtures_root)
    vocab = backend.tokenizer.get_vocab()
    if form == "json list":
        vocab = {k: v for k, v in vocab.items() if k != "[ARGS]"}
    grammar = forced_call_grammar(backend.family, list(tools), parallel, vocab)
    compiled = compile_grammar(grammar, backend.tokenizer)
    req = ChatRequest("m", (Message("user", "Weather in Paris?"),), tools)
    rng, hf = random.Random(f"{form}{parallel}"), backend.tokenizer
    counts = []
    for _ in range(12):
        raw = hf.decode(random_document(compiled, rng, set(backend.tokenizer.eos_token_ids)), skip_special_tokens=False)
        assert raw.startswith("[TOOL_CALLS]") and ("[ARGS]" in raw) == (form == "named"), raw
        events = ff.generate(ff.backend("mistral", fixtures_root, [raw]), req)
        names = {e.index: e.name for e in events if type(e).__name__ == "ToolCallStarted"}
        calls = [(names[e.index], e.arguments) for e in events if type(e).__name__ == "ToolCallDone" and e.complete]
        check(calls, set(SCHEMAS), single=not parallel)
        counts.append(len(calls))
    assert parallel == (max(counts) > 1)


def test_mistral_requests_with_a_forced_call_are_served(fixtures_root):
    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool

    backend = ff.backend("mistral", fixtures_root)
    req = ChatRequest("m", (Message("user", "Weather in Paris?"),), (Tool("get_weather", parameters=WEATHER),),
                      tool_choice="required")
    assert backend.prepare(req).grammar is not None


XML_TOOL = {"type": "object", "required": ["path", "mode"], "additionalProperties": False, "properties": {
    "path": {"type": "string", "pattern": "^[a-z]{1,8}\\.py$"},
    "mode": {"type": "string", "enum": ["read", "write"]},
    "note": {"type": "string", "maxLength": 10},
    "lines": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}, "maxItems": 3},
    "when": {"type": "string", "format": "date"},
    "force": {"type": ["boolean", "null"]}}}


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("family,opening", [("qwen3_coder", "<tool_call>\n<function="), ("glm", "<tool_call>"),
                                            ("gemma", "```tool_code\n")])
def test_calls_are_forced_in_the_familys_own_markup(fixtures_root, parallel, family, opening):
    """Qwen3-Coder writes ``<function=N>`` with one ``<parameter=K>`` tag a value, GLM the name then
    ``<arg_key>K</arg_key><arg_value>V</arg_value>`` pairs (strings verbatim, other types as JSON), Gemma
    ``N(key=value, …)`` in a ``tool_code`` fence: random documents of the forced-call grammar are read back by
    the family's parser as calls to the allowed tools whose arguments validate (a value never holds its
    closing tag)."""
    import random

    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool

    schemas = {**SCHEMAS, "open_file": XML_TOOL}
    tools = tuple(Tool(n, parameters=sch) for n, sch in schemas.items())
    backend = ff.backend(family, fixtures_root)
    req = ChatRequest("m", (Message("user", "Open a file."),), tools, tool_choice="required",
                      parallel_tool_calls=parallel)
    compiled = backend.prepare(req).grammar
    rng, hf = random.Random(f"{family}{parallel}"), backend.tokenizer
    counts, seen = [], set()
    for _ in range(25):
        raw = hf.decode(random_document(compiled, rng, set(backend.tokenizer.eos_token_ids)), skip_special_tokens=False)
        assert raw.startswith(opening), raw
        events = ff.generate(ff.backend(family, fixtures_root, [raw]), req.with_(tool_choice="auto"))
        names = {e.index: e.name for e in events if type(e).__name__ == "ToolCallStarted"}
        calls = [(names[e.index], e.arguments) for e in events if type(e).__name__ == "ToolCallDone" and e.complete]
        assert calls, raw
        for name, arguments in calls:
            jsonschema.validate(json.loads(arguments), schemas[name], format_checker=jsonschema.FormatChecker())
            seen.add(name)
        counts.append(len(calls))
    assert parallel == (max(counts) > 1) and seen == set(schemas)


@pytest.mark.parametrize("family", ["qwen3_coder", "glm"])
@pytest.mark.parametrize("schema,refused", [
    ({"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}}, "no type"),
    ({"type": "object", "properties": {"x": {"type": "string", "format": "email"}}}, "the format 'email'"),
    ({"type": "object", "properties": {"x": {"type": "string", "enum": [1, 2]}}}, "not all strings"),
])
def test_parameters_the_tags_cannot_carry_are_refused_by_name(fixtures_root, family, schema, refused):
    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool
    from tinytitan.errors import ApiError

    req = ChatRequest("m", (Message("user", "Go."),), (Tool("t", parameters=schema),), tool_choice="required")
    with pytest.raises(ApiError) as err:
        ff.backend(family, fixtures_root).prepare(req)
    assert err.value.param == "tool_choice" and "parameter 'x'" in err.value.message and refused in err.value.message


@pytest.mark.parametrize("family", ["function_gemma", "gemma4"])
def test_a_forced_call_in_a_markup_without_a_call_grammar_is_refused_by_name(family):
    from tinytitan.chat_request import Tool
    from tinytitan.engine.families import FAMILIES
    from tinytitan.engine.structured.tool_calls import forced_call_grammar
    from tinytitan.errors import ApiError

    with pytest.raises(ApiError) as err:
        forced_call_grammar(FAMILIES[family], [Tool("get_weather", parameters=WEATHER)], True, {})
    assert err.value.kind == "invalid_request" and err.value.param == "tool_choice"
    assert f"its family ('{family}') writes calls in a markup" in err.value.message


def test_gpt_oss_calls_are_forced_in_harmony(fixtures_root):
    """gpt-oss calls a function in a commentary message to ``functions.NAME`` whose JSON arguments follow
    ``<|constrain|>json<|message|>``: random documents of the forced-call grammar are read back by the
    harmony parser as one call to an allowed tool with valid arguments."""
    import random

    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool

    tools = tuple(Tool(n, parameters=sch) for n, sch in SCHEMAS.items())
    backend = ff.backend("gpt_oss", fixtures_root)
    req = ChatRequest("m", (Message("user", "Add."),), tools, tool_choice="required")
    compiled = backend.prepare(req).grammar
    rng, hf, seen = random.Random(5), backend.tokenizer, set()
    for _ in range(12):
        raw = hf.decode(random_document(compiled, rng, set(backend.tokenizer.eos_token_ids)), skip_special_tokens=False)
        assert raw.startswith("<|channel|>commentary to=functions."), raw
        events = ff.generate(ff.backend("gpt_oss", fixtures_root, [raw]), req.with_(tool_choice="auto"))
        names = {e.index: e.name for e in events if type(e).__name__ == "ToolCallStarted"}
        calls = [(names[e.index], e.arguments) for e in events if type(e).__name__ == "ToolCallDone" and e.complete]
        check(calls, set(SCHEMAS), single=True)
        seen |= {name for name, _ in calls}
    assert seen == set(SCHEMAS)


AUTO_CASES = {  # a call to the strict tool, opened; a whole call to the tool that is not strict, any arguments
    "mistral": ("Let me see.[TOOL_CALLS]add[ARGS]", 'Hi.[TOOL_CALLS]get_weather[ARGS]{"zzz": [true]}'),
    "qwen3_coder": ("Let me see.<tool_call>\n<function=add>\n",
                    "Hi.<tool_call>\n<function=get_weather>\n<parameter=zzz>\nyes\n</parameter>\n</function>\n"
                    "</tool_call>"),
    "glm": ("Let me see.<tool_call>add\n",
            "Hi.<tool_call>get_weather\n<arg_key>zzz</arg_key>\n<arg_value>yes</arg_value>\n</tool_call>"),
}


@pytest.mark.parametrize("family", sorted(AUTO_CASES))
def test_under_auto_a_call_once_opened_is_held_to_a_strict_tools_schema(fixtures_root, family):
    """tool_choice auto on the other markups: text is free, and a call the model opens is written in the
    family's markup; a strict tool's arguments validate, a tool that is not strict takes any."""
    import random

    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool

    tools = (Tool("add", parameters=ADD, strict=True), Tool("get_weather", parameters=WEATHER))
    backend = ff.backend(family, fixtures_root)
    req = ChatRequest("m", (Message("user", "Add."),), tools, reasoning=False)
    compiled = backend.prepare(req).grammar
    assert compiled is not None
    hf, (opened, loose) = backend.tokenizer, AUTO_CASES[family]
    prefix = list(hf.encode(opened, add_special_tokens=False))
    rng = random.Random(family)
    for _ in range(12):
        matcher = compiled.matcher()
        assert matcher.consume_tokens(prefix), matcher.get_error()
        walked = random_document_from(compiled, matcher, rng, set(backend.tokenizer.eos_token_ids), stop=1.0)
        raw = hf.decode(prefix + walked, skip_special_tokens=False)
        events = ff.generate(ff.backend(family, fixtures_root, [raw]), req)
        names = {e.index: e.name for e in events if type(e).__name__ == "ToolCallStarted"}
        calls = [(names[e.index], e.arguments) for e in events if type(e).__name__ == "ToolCallDone" and e.complete]
        assert calls and calls[0][0] == "add", raw
        check(calls[:1], {"add"}, single=True)
    matcher = compiled.matcher()
    tokens = list(hf.encode(loose, add_special_tokens=False))
    assert matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting(), matcher.get_error()


def test_under_auto_a_strict_tool_the_tags_cannot_hold_is_served_unmasked(fixtures_root, caplog):
    """A forced call refuses such a tool by name; under auto the request is served, the call not masked, and
    the log says why."""
    import family_fixtures as ff
    from tinytitan.chat_request import ChatRequest, Message, Tool

    untyped = {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}}
    req = ChatRequest("m", (Message("user", "Go."),), (Tool("t", parameters=untyped, strict=True),), reasoning=False)
    assert ff.backend("qwen3_coder", fixtures_root).prepare(req).grammar is None
    assert "parameter 'x'" in caplog.text


def test_a_forced_call_after_a_prompt_that_opened_a_thought_closes_it_first(fixtures_root):
    """A template that always opens a thought (MiniMax M2 ends its generation prompt with ``<think>``): the
    forced call, and a JSON output format, start by closing it, so the parser reads them as the answer."""
    import family_fixtures as ff
    from tinytitan.chat_request import Grammar, Tool
    from tinytitan.engine.structured.tool_calls import answer_after_thought, forced_call_grammar

    backend = ff.backend("qwen", fixtures_root)
    vocab = backend.tokenizer.get_vocab()
    close = f"<[{vocab['</think>']}]>" + ' "\\n"{0,2}'  # the blank line MiniMax's template writes after it
    tools = [Tool("get_weather", parameters=WEATHER)]
    assert forced_call_grammar(backend.family, tools, False, vocab, True).source.startswith(f"start: {close} blocks")
    assert forced_call_grammar(backend.family, tools, False, vocab).source.startswith("start: blocks")
    schema = Grammar("json_schema", WEATHER, where="response_format")
    assert answer_after_thought(schema, backend.family, vocab, True).source.startswith(f"start: {close} doc")
    assert answer_after_thought(schema, backend.family, vocab, False) is schema


VIEW_IMAGE = {"type": "function", "name": "view_image", "strict": True,
              "parameters": {"type": "object", "properties": {"path": {"type": "string", "enum": ["shot.png"]}},
                             "required": ["path"], "additionalProperties": False}}


async def test_a_call_closed_by_an_ordinary_token_is_forced(serve):
    """Gemma 3's calls end with ```` ``` ````, one ordinary token of the demo vision model's vocabulary: the
    grammar matches it by its text. (Named as a token, llguidance refused it again after the rollback over it that
    the decoder's forced runs do: every forced call of this model failed as a server error.)"""
    from tinytitan.demo_model.vision import MODEL_ID, ensure_demo_vision
    from tinytitan.engine.backends.vision import VisionBackend
    from tinytitan.engine.structured.compile import token_markers

    vision = VisionBackend(ensure_demo_vision(), MODEL_ID)
    markers = token_markers(vision.tokenizer)
    assert "```" in vision.tokenizer.get_vocab() and "```" not in markers and "<end_of_turn>" in markers
    s = await serve(backend=vision)
    for sampling in SAMPLING:
        r = await responses_client(s).responses.create(
            model=MODEL_ID, input="Look at shot.png", tools=[VIEW_IMAGE], store=False, parallel_tool_calls=False,
            tool_choice={"type": "function", "name": "view_image"}, temperature=sampling["temperature"],
            extra_body={"seed": sampling.get("seed")})
        assert r.status == "completed", r.error
        (call,) = r.output
        assert call.type == "function_call" and call.name == "view_image", call
        assert json.loads(call.arguments) == {"path": "shot.png"}


async def test_the_call_record_proxy_asks_for_is_made_on_every_wire(serve, demo_backend):
    """``record_proxy.py --tool-call NAME=JSON`` in forward mode rewrites a first request to ask for exactly that
    call (tests/test_e2e_vision.py makes Codex's ``view_image`` happen so): each API's spelling of it is a forced
    call the server's grammar makes the random model write, arguments and all."""
    ask = load_record_asking().asking_for_call
    args, free = {"path": "shot.png"}, {"type": "object", "properties": {"path": {"type": "string"}}}
    s = await serve(backend=demo_backend)
    model = demo_backend.model_id

    chat = ask("/v1/chat/completions", {"model": model, "messages": USER, "max_tokens": 120, "tools": [
        *CHAT_TOOLS, {"type": "function", "function": {"name": "view_image", "parameters": free}}]}, "view_image", args)
    r = await chat_client(s).chat.completions.create(**chat)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in r.choices[0].message.tool_calls] == \
        [("view_image", args)]

    responses = ask("/v1/responses", {"model": model, "input": "look", "max_output_tokens": 120, "store": False,
                                      "tools": [*RESPONSES_TOOLS, {"type": "function", "name": "view_image",
                                                                   "parameters": free}]}, "view_image", args)
    r = await responses_client(s).responses.create(**responses)
    assert [(i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"] == [("view_image", args)]

    messages = ask("/v1/messages", {"model": model, "messages": USER, "max_tokens": 120, "tools": [
        *MESSAGES_TOOLS, {"name": "view_image", "input_schema": free}]}, "view_image", args)
    msg = await anthropic_util.sdk(s).messages.create(**messages)
    assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == [("view_image", args)]

    assert ask("/v1/responses", {"model": model, "input": "look", "tools": RESPONSES_TOOLS}, "view_image", args) is None

"""The spec holds the truth: what Python used to keep its own copy of — Messages' ``thinking.type`` and
``output_config.effort`` lists, the compact route's usage, the Responses lookups' query parameters — is read
from the YAML alone. Each test makes a YAML-only edit (the text of a copy of ``spec/``, nothing else) and
shows the server change with it."""

from __future__ import annotations

import shutil

import anthropic
import httpx
import openai
import pytest

from sse import parse_sse
from tinytitan.speclang.load import SpecError, load_protocol, spec_dir

MODEL = "tinytitan-scripted"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


@pytest.fixture
def edited_specs(tmp_path):
    """``edit(file, old, new)`` replaces text in a copy of the shipped spec directory (``old`` must be there
    exactly once, so an edit cannot silently miss); the directory is returned for ``serve(spec_dir=…)``."""
    for p in spec_dir().glob("*.yaml"):
        shutil.copy(p, tmp_path / p.name)

    def edit(name: str, old: str, new: str):
        path = tmp_path / name
        text = path.read_text()
        assert text.count(old) == 1, (name, old)
        path.write_text(text.replace(old, new))
        return tmp_path

    return edit


async def test_thinking_types_and_effort_levels_are_the_specs(serve, edited_specs):
    edited_specs("anthropic_messages.yaml", "{enum: [enabled, disabled, adaptive, between_tools]}",
                 "{enum: [enabled, disabled, adaptive, between_tools, sometimes]}")
    specs = edited_specs("anthropic_messages.yaml", "{enum: [low, medium, high, xhigh, max, null]}",
                         "{enum: [low, medium, high, xhigh, max, null, ultra]}")
    stock, edited = await serve(["ok"]), await serve(["ok"], spec_dir=specs, strict=False)
    body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    for extra, param in (({"thinking": {"type": "sometimes"}}, "thinking.type"),
                         ({"output_config": {"effort": "ultra"}}, "output_config.effort")):
        async with anthropic.AsyncAnthropic(base_url=stock.base, api_key="x", max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as caught:
                await c.messages.create(**body, extra_body=extra)
            assert param in caught.value.body["error"]["message"]
        async with httpx.AsyncClient() as h:
            r = await h.post(edited.url("/v1/messages"), json={**body, **extra}, headers=ANTHROPIC)
        assert r.status_code == 200, r.text
        assert r.json()["content"][0]["text"] == "ok"


async def test_the_usage_of_a_response_and_of_a_compaction_is_one_mapping(serve, edited_specs):
    """The stream's terminal events and POST /v1/responses/compact write usage from one YAML mapping: an
    edit to it shows in both."""
    specs = edited_specs("openai_responses.yaml", "cache_write_tokens: 0}", "cache_write_tokens: 7}")
    stock, edited = await serve(["ok", "A summary."]), await serve(["ok", "A summary."], spec_dir=specs, strict=False)
    async with openai.AsyncOpenAI(base_url=stock.url("/v1"), api_key="x", max_retries=0) as c:
        r = await c.responses.create(model=MODEL, input="hi", store=False)
        compacted = await c.responses.compact(model=MODEL, input=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    assert r.usage.input_tokens_details.cache_write_tokens == 0
    assert compacted.usage.input_tokens_details.cache_write_tokens == 0
    assert compacted.usage.input_tokens > 0 and compacted.usage.total_tokens == \
        compacted.usage.input_tokens + compacted.usage.output_tokens
    async with httpx.AsyncClient(timeout=30) as h:
        streamed = await h.post(edited.url("/v1/responses"), json={"model": MODEL, "input": "hi", "stream": True})
        compact = await h.post(edited.url("/v1/responses/compact"), json={"model": MODEL, "input": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]})
    (_, completed), = [e for e in parse_sse(streamed.text) if e[0] == "response.completed"]
    assert completed["response"]["usage"]["input_tokens_details"]["cache_write_tokens"] == 7
    assert compact.json()["usage"]["input_tokens_details"]["cache_write_tokens"] == 7
    assert compact.json()["object"] == "response.compaction"


async def test_query_parameters_are_the_routes_table(serve, edited_specs):
    specs = edited_specs("openai_responses.yaml", "limit: {type: integer, min: 1, max: 100, default: 20}",
                         "limit: {type: integer, min: 1, max: 3, default: 2}")
    stock, edited = await serve(["ok"]), await serve(["ok"], spec_dir=specs, strict=False)
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    pages = {}
    for name, s in (("stock", stock), ("edited", edited)):
        async with httpx.AsyncClient(timeout=30) as h:
            r = await h.post(s.url("/v1/responses"), json={"model": MODEL, "input": turns})
            rid = r.json()["id"]
            items = await h.get(s.url(f"/v1/responses/{rid}/input_items"))
            over = await h.get(s.url(f"/v1/responses/{rid}/input_items"), params={"limit": 4})
            bad_order = await h.get(s.url(f"/v1/responses/{rid}/input_items"), params={"order": "sideways"})
            bad_stream = await h.get(s.url(f"/v1/responses/{rid}"), params={"stream": "yes"})
            replay = await h.get(s.url(f"/v1/responses/{rid}"), params={"stream": "true", "starting_after": 1})
        pages[name] = (items.json(), over)
        assert bad_order.status_code == 400 and bad_order.json()["error"]["param"] == "order"
        assert "is not one of ['asc', 'desc']" in bad_order.json()["error"]["message"]
        assert bad_stream.status_code == 400 and bad_stream.json()["error"]["param"] == "stream"
        assert replay.status_code == 200 and replay.headers["content-type"].startswith("text/event-stream")
        assert [d["sequence_number"] for _, d in parse_sse(replay.text)][0] == 2
    (stock_page, stock_over), (edited_page, edited_over) = pages["stock"], pages["edited"]
    assert (len(stock_page["data"]), stock_page["limit"]) == (5, 20) and stock_over.status_code == 200
    assert (len(edited_page["data"]), edited_page["limit"], edited_page["has_more"]) == (2, 2, True)
    assert edited_over.status_code == 400
    assert edited_over.json()["error"]["message"] == "Invalid value for 'limit': 4 (must be between 1 and 3)"


async def test_the_roots_answers_and_their_order_are_the_specs(serve, edited_specs):
    """GET /'s answers (extra.root) by the Accept header: the text and which type wins a tie are the table's."""
    stock_table = ("    text/plain: {text: Ollama is running}\n    text/html: {handler: dashboard}\n"
                   "    application/json: {handler: status}\n")
    specs = edited_specs("shared.yaml", stock_table, "    application/json: {handler: status}\n"
                         "    text/plain: {text: Up}\n    text/html: {handler: dashboard}\n")
    stock, edited = await serve(["ok"]), await serve(["ok"], spec_dir=specs, strict=False)
    axios = {"accept": "application/json, text/plain, */*"}  # a tie: the first of the table's types
    async with httpx.AsyncClient() as h:
        assert (await h.get(stock.url("/"))).text == "Ollama is running"
        assert (await h.get(stock.url("/"), headers=axios)).text == "Ollama is running"
        assert (await h.get(edited.url("/"), headers={"accept": "text/plain"})).text == "Up"
        assert (await h.get(edited.url("/"), headers=axios)).json()["status"] == "ok"


@pytest.mark.parametrize("name", ["page", "health"])  # (health: a route's handler, not one of GET /'s answers)
def test_a_root_answer_the_module_cannot_give_fails_at_start(edited_specs, name):
    """A handler GET / cannot give is refused when the shared module loads its spec, naming the key, the handler
    and the answers there are (the module's ``root_handlers``, their one list: the meta-schema names none)."""
    from tinytitan.protocols.shared import Shared

    specs = edited_specs("shared.yaml", "text/html: {handler: dashboard}", f"text/html: {{handler: {name}}}")
    with pytest.raises(SpecError) as refused:
        Shared(specs)
    assert str(refused.value) == (f"shared.yaml: extra.root.text/html: handler '{name}' is not one of the shared "
                                  "module's answers: dashboard, status")


ROOT_TABLE = ("  root:\n    text/plain: {text: Ollama is running}\n    text/html: {handler: dashboard}\n"
              "    application/json: {handler: status}\n")


@pytest.mark.parametrize("table, where", [
    ("  root: [text/plain]\n", "extra.root: "),
    ("  root: {}\n", "extra.root: "),
    ("  root:\n    text/plain: Ollama is running\n", "extra.root.text/plain: "),
    ("  root:\n    text/plain: {text: 1}\n", "extra.root.text/plain: "),
    ("  root:\n    text/plain: {text: Up, handler: status}\n", "extra.root.text/plain: "),
    ("  root:\n    application/json: {handler: status, text: x}\n", "extra.root.application/json: "),
    ("  not_root: {}\n", "extra: 'root' is a required property"),
])
def test_a_malformed_root_table_is_refused_when_the_spec_loads_naming_the_key(edited_specs, table, where):
    """GET /'s answers are declared in the spec and their shape is the meta-schema's: a wrong one fails at load,
    in the words every spec file's error has (file, path, problem), not on the first GET /."""
    specs = edited_specs("shared.yaml", ROOT_TABLE, table)
    with pytest.raises(SpecError) as refused:
        load_protocol("shared", specs)
    assert str(refused.value).startswith(f"shared.yaml: {where}"), refused.value


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_websocket_connection_that_could_keep_no_response_is_refused_when_the_spec_loads(edited_specs, value):
    """A Responses WebSocket connection keeps its own newest ``keep_responses`` (a bounded memo of at least one):
    a count that keeps none fails at load, naming the key, not on every connection the server accepts."""
    specs = edited_specs("openai_responses.yaml", "keep_responses: 16", f"keep_responses: {value}")
    with pytest.raises(SpecError) as refused:
        load_protocol("openai_responses", specs)
    assert str(refused.value).startswith("openai_responses.yaml: extra.websocket.keep_responses: "), refused.value


async def test_ollamas_refusal_of_what_the_model_lacks_is_the_specs(serve, edited_specs, tmp_path):
    """``think`` asked of a model that does not think is refused in the words of spec/ollama.yaml's
    ``needs_capability`` table: an edit to its row shows on the wire, the status and the field kept."""
    import family_fixtures

    specs = edited_specs("ollama.yaml", 'message: "{model} does not support thinking"',
                         'message: "{model} thinks not"')
    s = await serve(backend=family_fixtures.backend("llama3", tmp_path, outputs=("plain",)), spec_dir=specs,
                    strict=False)
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json={"model": "fixture-llama3", "think": True, "stream": False,
                                                    "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json() == {"error": '"fixture-llama3" thinks not'}, r.text


async def test_a_spec_without_the_capability_table_refuses_nothing_by_it(serve, edited_specs, tmp_path):
    """``extra.needs_capability`` is optional, as the meta-schema has it: a spec whose maintainers dropped the
    table serves ``think`` and ``suffix`` as the engine takes them, where reading it unconditionally made every
    Ollama chat and generate a 500."""
    import family_fixtures

    text = (spec_dir() / "ollama.yaml").read_text()
    table = text[text.index("  needs_capability:\n"):text.index("  # errors said in Ollama's words")]
    specs = edited_specs("ollama.yaml", table, "")
    s = await serve(backend=family_fixtures.backend("llama3", tmp_path, outputs=("plain",)), spec_dir=specs,
                    strict=False)
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json={"model": "fixture-llama3", "think": True, "stream": False,
                                                    "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code < 500 and "does not support thinking" not in r.text, r.text


@pytest.mark.parametrize("row", ["{field: think, capability: thinking}",
                                 "{field: think, capability: thinking, message: m, status: 400}"])
def test_a_malformed_capability_row_is_refused_when_the_spec_loads(edited_specs, row):
    """The table's rows have the meta-schema's shape: a row without its words, or with a key it does not have,
    fails at load naming the row."""
    stock = '{field: think, capability: thinking, message: "{model} does not support thinking"}'
    specs = edited_specs("ollama.yaml", stock, row)
    with pytest.raises(SpecError) as refused:
        load_protocol("ollama", specs)
    assert str(refused.value).startswith("ollama.yaml: extra.needs_capability[0]: "), refused.value

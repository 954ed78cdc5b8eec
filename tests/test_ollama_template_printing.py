"""Go templates of Ollama's library, served: what Go prints, Jinja prints. Tools printed whole are JSON (Go's
String method marshals them), not Python literals; literal text holding Jinja's markers is carried over (a raw
tag Jinja reads); a loop's index is its own inside a nested loop; string literals keep their characters; no tools
is an empty list to range over."""

from __future__ import annotations

import json

import pytest

from gguf_util import demo_gguf_bytes
from gguf_util import cache  # noqa: F401  (the conversions' cache, per test)
from ollama_helpers import CONFIG, blob, manifest
from tinytitan.models.resolve import list_models


# Ollama's library templates (ollama.com/library/<model>, the ``template`` layer), verbatim
MISTRAL_SMALL_24B = """{{- range $index, $_ := .Messages }}
{{- if eq .Role "system" }}[SYSTEM_PROMPT]{{ .Content }}[/SYSTEM_PROMPT]
{{- else if eq .Role "user" }}
{{- if and (le (len (slice $.Messages $index)) 2) $.Tools }}[AVAILABLE_TOOLS]{{ $.Tools }}[/AVAILABLE_TOOLS]
{{- end }}[INST]{{ .Content }}[/INST]
{{- else if eq .Role "assistant" }}
{{- if .Content }}{{ .Content }}
{{- if not (eq (len (slice $.Messages $index)) 1) }}</s>
{{- end }}
{{- else if .ToolCalls }}[TOOL_CALLS][
{{- range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{- end }}]</s>
{{- end }}
{{- else if eq .Role "tool" }}[TOOL_RESULTS]{"content": {{ .Content }}}[/TOOL_RESULTS]
{{- end }}
{{- end }}"""
# hermes3's: literal text holding "}}" (a JSON schema)
HERMES3 = """{{- if .Tools }}<|im_start|>system
Here are the available tools: <tools>
{{- range .Tools }}
{{- . }}
{{- end }}</tools> Use the following pydantic model json schema for each tool call you will make: {"properties": {"arguments": {"title": "Arguments", "type": "object"}, "name": {"title": "Name", "type": "string"}}, "required": ["arguments", "name"], "title": "FunctionCall", "type": "object"}<|im_end|>
{{ end }}
{{- range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
"""


def _served(tmp_path, template: str):
    from tinytitan.engine.backends.mlx import MLXBackend

    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    layers = [("model", blob(root, demo_gguf_bytes(tmp_path, with_template=False))), ("template", blob(root, template.encode()))]
    manifest(root, "registry.ollama.ai/library/m/latest", layers, blob(root, json.dumps(CONFIG).encode()), 1_700_000_000)
    [served] = list_models(root, "float32")
    return MLXBackend(served.path, served.model_id, lazy=True)


def test_tools_a_go_template_prints_whole_are_json_as_go_prints_them(tmp_path, cache):
    from tinytitan.chat_request import ChatRequest, Message, Tool

    backend = _served(tmp_path, MISTRAL_SMALL_24B)
    tool = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                           "required": ["city"]})
    prompt = backend.encode(ChatRequest(model="m", messages=(Message("user", "Paris?"),), tools=(tool,)))[0]
    declared = prompt.split("[AVAILABLE_TOOLS]")[1].split("[/AVAILABLE_TOOLS]")[0]
    # observed: [{'type': 'function', 'function': {'name': 'get_weather', ... a Python literal
    assert json.loads(declared)[0]["function"]["name"] == "get_weather"


def test_literal_text_holding_jinja_markers_is_carried_over(tmp_path, cache):
    from tinytitan.chat_request import ChatRequest, Message

    backend = _served(tmp_path, HERMES3)
    # observed: jinja2.TemplateSyntaxError: Encountered unknown tag 'raw'
    prompt = backend.encode(ChatRequest(model="m", messages=(Message("user", "hi"),)))[0]
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def _render(go: str, messages, tools=None) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    from tinytitan.models.go_template import translate

    out = render_jinja_template([messages], tools=tools, chat_template=translate(go), add_generation_prompt=True)
    return out[0][0]


CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}]}


def test_a_ranges_index_is_its_own_inside_a_nested_range():
    # Go: $i is the message's index wherever the range's body reads it; observed "[0]" (the inner loop's index)
    go = '{{ range $i, $m := .Messages }}{{ range .ToolCalls }}[{{ $i }}]{{ end }}{{ end }}'
    assert _render(go, [{"role": "user", "content": "go"}, CALL]) == "[1]"


def test_a_string_literal_keeps_its_characters():
    # observed: 'Ã©â\\x86\\x92ï½\\x9c' (the UTF-8 bytes read as Latin-1)
    assert _render('{{ range .Messages }}{{ "é→｜\\n" }}{{ end }}', [{"role": "user", "content": "x"}]) == "é→｜\n"


def test_a_string_literals_byte_escapes_are_bytes_as_go_reads_them():
    # Go's "\xc3\xa9" is the two bytes of "é" (read as characters: 'Ã©'); "\u00e9" a code point; "\101" "A"
    go = '{{ range .Messages }}{{ "\\xc3\\xa9 \\u00e9 \\101\\x42" }}{{ end }}'
    got = _render(go, [{"role": "user", "content": "x"}])
    assert got == "é é AB"


def test_a_string_literal_it_cannot_read_is_refused_by_name():
    from tinytitan.models.go_template import Untranslatable, translate

    for go in ('{{ range .Messages }}{{ "\\x4" }}{{ end }}', '{{ range .Messages }}{{ printf "\\x4%s" .Content }}{{ end }}',
               '{{ range .Messages }}{{ "\\xff" }}{{ end }}'):  # (not UTF-8)
        with pytest.raises(Untranslatable, match="string literal"):
            translate(go)


def test_no_tools_is_an_empty_list_to_range_over():
    # Go ranges over a nil slice zero times (len 0); observed: TypeError 'NoneType' object is not iterable
    go = '{{ range .Messages }}{{ .Content }}{{ end }}{{ len .Tools }}{{ range .Tools }}T{{ end }}'
    assert _render(go, [{"role": "user", "content": "x"}]) == "x0"

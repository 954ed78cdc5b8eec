"""The libraries users already have: an Ollama library (manifests and blobs, as Ollama writes them) and an
LM Studio models folder, served as they stand and listed as those apps list them.

The trees are built here as the apps lay them out: Ollama's ``manifests/<host>/<namespace>/<model>/<tag>``
(JSON manifests naming blobs by digest) beside ``blobs/sha256-<hex>``; LM Studio's ``<publisher>/<repo>/``
folders holding a GGUF (and its vision projector) or an MLX model.
"""

from __future__ import annotations

import json
import logging
import shutil

import httpx
import jinja2
import pytest

from gguf_util import tokenizer_metadata, write_gguf
from tinytitan.demo_model import build_demo_model, ensure_demo_model
from tinytitan.engine.backends.mlx import MLXBackend
from tinytitan.models.go_template import Untranslatable, translate
from tinytitan.models.resolve import list_models, models_root
from ollama_helpers import CONFIG, blob, manifest

CHATML_GO = """{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .ToolCalls }}{{ range .ToolCalls }}<tool_call>
{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
</tool_call>{{ end }}{{ else }}{{ .Content }}{{ end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}"""
SYSTEM_LAYER = "You are Tiny, a terse assistant."
HISTORY = '[{"role": "user", "content": "Who are you?"}, {"role": "assistant", "content": "A coder."}]\n'


def render(template: str, messages) -> str:
    """As a chat template renders (transformers' environment: trim_blocks and lstrip_blocks)."""
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(template).render(messages=messages)


def test_a_go_template_translates_to_the_jinja_that_renders_the_same():
    jinja = translate(CHATML_GO)
    convo = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]
    # what Go's text/template writes for this conversation (read off the template by hand)
    assert render(jinja, convo) == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                                    "<|im_start|>assistant\n")
    call = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}]}]
    assert render(jinja, call).endswith('<|im_start|>assistant\n<tool_call>\n{"name": "ls", "arguments": '
                                        '{"path": "."}}\n</tool_call>')


@pytest.mark.parametrize("source, named", [
    ("{{ .Prompt }}{{ range .Messages }}{{ end }}", "beside .Messages"),
    ('{{ range .Messages }}{{ template "x" . }}{{ end }}', "{{ template }} is not translated"),
    ("{{ range .Messages }}{{ .Content | upper }}{{ end }}", "the pipe"),
    ('{{ range .Messages }}{{ printf "%q" .Content }}{{ end }}', "printf '%q' is not translated"),
    ("{{ range .Messages }}{{ .Content }}{{ end }}{{ continue }}", "{{ continue }} outside a range"),
    ("{{ range .Messages }}{{ $x = .Content }}{{ end }}", r"\$x is assigned before it is declared"),
    ("{{ range .Messages }}{{ .Content }}", "without its {{ end }}"),
])
def test_untranslatable_templates_are_refused_by_name(source, named):
    with pytest.raises(Untranslatable, match=named):
        translate(source)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """An Ollama library: tiny:latest and tiny:q4 (one GGUF with its own template), acme/coder:1b (a GGUF
    without one: the manifest's Go template), a model on another host, one whose template cannot be
    translated."""
    import json as _json

    from mlx.core import load as mx_load

    root = tmp_path_factory.mktemp("ollama")
    (root / "blobs").mkdir()
    demo = ensure_demo_model()
    config = _json.loads((demo / "config.json").read_text())
    weights = mx_load(str(demo / "model.safetensors"))
    tmp = tmp_path_factory.mktemp("ggufs")
    with_template = write_gguf(tmp / "a.gguf", weights, config, "qwen3", tokenizer_metadata(demo)).read_bytes()
    meta = tokenizer_metadata(demo)
    meta.pop("tokenizer.chat_template")
    without = write_gguf(tmp / "b.gguf", weights, config, "qwen3", meta).read_bytes()
    a, b = blob(root, with_template), blob(root, without)
    cfg = blob(root, json.dumps(CONFIG).encode())
    params = blob(root, json.dumps({"stop": ["<|im_end|>", "not one token"], "num_ctx": 2048,
                                    "temperature": 0.6, "top_k": 20, "min_p": 0.05,
                                    "repeat_penalty": 1.1}).encode())
    template = blob(root, CHATML_GO.encode())
    system = blob(root, SYSTEM_LAYER.encode())
    bad = blob(root, b'{{ range .Messages }}{{ template "turn" . }}{{ end }}')
    facts = {
        "tiny:latest": manifest(root, "registry.ollama.ai/library/tiny/latest",
                                [("model", a), ("params", params), ("system", system)], cfg, 1_700_000_000),
        "tiny:q4": manifest(root, "registry.ollama.ai/library/tiny/q4", [("model", a)], cfg, 1_700_000_100),
        "acme/coder:1b": manifest(root, "registry.ollama.ai/acme/coder/1b", [("model", b), ("template", template),
                                  ("messages", blob(root, HISTORY.encode()))],
                                  cfg, 1_700_000_200),
        "example.com/team/m:v1": manifest(root, "example.com/team/m/v1", [("model", a)], cfg, 1_700_000_300),
    }
    manifest(root, "registry.ollama.ai/library/broken/latest", [("model", b), ("template", bad)], cfg, 1_700_000_400)
    return root, facts


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))


def test_an_ollama_library_is_listed_as_ollama_names_it(library, cache, caplog):
    root, facts = library
    caplog.set_level(logging.WARNING, logger="tinytitan.models")
    found = list_models(root, "float32")
    assert [m.model_id for m in found] == ["acme/coder:1b", "example.com/team/m:v1", "tiny", "tiny:q4"]
    assert "broken:latest: not served: broken:latest: its Ollama template cannot be translated" in caplog.text
    tiny = next(m for m in found if m.model_id == "tiny")
    config = json.loads((tiny.path / "config.json").read_text())
    # num_ctx is the served window; the model's own max_position_embeddings (long-RoPE scaling reads it) stays
    converted = json.loads((tiny.path / "model-00001.safetensors").resolve().parent.joinpath("config.json").read_text())
    assert config["max_position_embeddings"] == converted["max_position_embeddings"] != 2048
    assert MLXBackend(tiny.path, "tiny", lazy=True).context_window == 2048
    vocab = json.loads((tiny.path / "tokenizer.json").read_text())["added_tokens"]
    im_end = next(t["id"] for t in vocab if t["content"] == "<|im_end|>")
    assert im_end in config["eos_token_id"]
    gen = json.loads((tiny.path / "generation_config.json").read_text())
    assert gen["temperature"] == 0.6 and gen["top_k"] == 20
    assert gen["stop_strings"] == ["not one token"] and gen["system_prompt"] == SYSTEM_LAYER
    # the same blob converted once, served under each name
    assert (tiny.path / "model-00001.safetensors").resolve() == \
        (next(m for m in found if m.model_id == "tiny:q4").path / "model-00001.safetensors").resolve()
    coder = next(m for m in found if m.model_id == "acme/coder:1b")
    assert "_system" in json.loads((coder.path / "tokenizer_config.json").read_text())["chat_template"]


async def test_api_tags_lists_what_ollama_list_would(serve, library, cache):
    import ollama

    root, facts = library
    found = list_models(root, "float32")
    s = await serve(backend=[MLXBackend(m.path, m.model_id, lazy=True) for m in found])
    async with httpx.AsyncClient(timeout=60) as c:
        tags = (await c.get(s.url("/api/tags"))).json()
        ollama.ListResponse.model_validate(tags)
        assert [m["name"] for m in tags["models"]] == ["example.com/team/m:v1", "acme/coder:1b", "tiny:q4",
                                                        "tiny:latest"]  # newest first, as Ollama sorts
        for m in tags["models"]:
            digest, size = facts[m["name"]]
            assert m["digest"] == digest and m["size"] == size and m["model"] == m["name"]
            assert m["details"] == {"parent_model": "", "format": "gguf", "family": "qwen3", "families": ["qwen3"],
                                    "parameter_size": "3.37M", "quantization_level": "F32"}
        assert tags["models"][-1]["modified_at"].startswith("2023-11-14T22:13:20")
        r = await c.post(s.url("/api/chat"), json={"model": "acme/coder:1b", "stream": False, "options":
                                                   {"num_predict": 2}, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        ps = (await c.get(s.url("/api/ps"))).json()
        ollama.ProcessResponse.model_validate(ps)
        [running] = ps["models"]
        weights = sum(f.stat().st_size for f in next(m for m in found if m.model_id == "acme/coder:1b").path.glob(
            "*.safetensors"))
        assert running["name"] == "acme/coder:1b" and running["size"] == weights and running["size_vram"] == 0
        shown = (await c.post(s.url("/api/show"), json={"model": "tiny"})).json()
        ollama.ShowResponse.model_validate(shown)
        assert shown["system"] == SYSTEM_LAYER  # the manifest's SYSTEM and PARAMETERs, as ollama show prints them
        assert shown["parameters"].splitlines() == [f"{k:<30} {v}" for k, v in [
            ("min_p", "0.05"), ("num_ctx", "2048"), ("repeat_penalty", "1.1"), ("stop", '"<|im_end|>"'),
            ("stop", '"not one token"'), ("temperature", "0.6"), ("top_k", "20")]]
        assert f'SYSTEM """{SYSTEM_LAYER}"""' in shown["modelfile"] and "PARAMETER num_ctx" in shown["modelfile"]
        # the manifest's time, as `ollama list` and `ollama show` both give it (not the time the server started)
        assert shown["modified_at"] == tags["models"][-1]["modified_at"]
        bare = (await c.post(s.url("/api/show"), json={"model": "tiny:q4"})).json()
        assert "system" not in bare and bare["parameters"] == ""
        models = (await c.get(s.url("/v1/models"))).json()["data"]
        tiny = next(m for m in models if m["id"] == "tiny")
        assert tiny["quantization"] == "F32" and tiny["parameters"] > 0 and tiny["digest"].startswith("sha256:")


def test_lm_studio_folders_are_named_publisher_repo(tmp_path, cache):
    demo = ensure_demo_model()
    root = tmp_path / ".lmstudio" / "models"
    import json as _json

    from mlx.core import load as mx_load

    config = _json.loads((demo / "config.json").read_text())
    weights = mx_load(str(demo / "model.safetensors"))
    one = root / "lmstudio-community" / "Tiny-Chat-GGUF"
    one.mkdir(parents=True)
    write_gguf(one / "Tiny-Chat-Q8_0.gguf", weights, config, "qwen3", tokenizer_metadata(demo))
    shutil.copy(one / "Tiny-Chat-Q8_0.gguf", one / "mmproj-Tiny-Chat-F16.gguf")  # a vision projector: no model
    two = root / "acme" / "Two-GGUF"
    two.mkdir(parents=True)
    for q in ("Q4_K_M", "Q8_0"):
        shutil.copy(one / "Tiny-Chat-Q8_0.gguf", two / f"Two-{q}.gguf")
    build_demo_model(root / "mlx-community" / "Tiny-Chat-4bit")
    ids = [m.model_id for m in list_models(root, "float32")]
    assert ids == ["acme/Two-GGUF/Two-Q4_K_M", "acme/Two-GGUF/Two-Q8_0", "lmstudio-community/Tiny-Chat-GGUF",
                   "mlx-community/Tiny-Chat-4bit"]


def test_models_dir_names_the_apps_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama-models"))
    assert models_root("ollama") == tmp_path / "ollama-models"
    monkeypatch.delenv("OLLAMA_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models_root("ollama") == tmp_path / ".ollama" / "models"
    (tmp_path / ".cache" / "lm-studio" / "models").mkdir(parents=True)
    assert models_root("lmstudio") == tmp_path / ".cache" / "lm-studio" / "models"
    (tmp_path / ".lmstudio" / "models").mkdir(parents=True)
    assert models_root("lmstudio") == tmp_path / ".lmstudio" / "models"


def test_the_manifests_system_prompt_and_stop_words_are_the_models_defaults(library, cache):
    """The SYSTEM layer opens a conversation that has no system message of its own; a request's own system
    message wins. The params' multi-token stop word is a default stop string, replaced by a request's own."""
    from tinytitan.chat_request import ChatRequest, Message

    root, _ = library
    found = {m.model_id: m for m in list_models(root, "float32")}
    tiny = MLXBackend(found["tiny"].path, "tiny", lazy=True)
    assert tiny.default_system == SYSTEM_LAYER and tiny.default_stop == ("not one token",)
    bare = ChatRequest(model="tiny", messages=(Message("user", "hi"),))
    assert tiny.encode(bare)[0].startswith(f"<|im_start|>system\n{SYSTEM_LAYER}<|im_end|>\n<|im_start|>user\nhi")
    own = bare.with_(messages=(Message("system", "Be loud."), Message("user", "hi")))
    assert SYSTEM_LAYER not in tiny.encode(own)[0] and "Be loud." in tiny.encode(own)[0]
    made = tiny.prepare(bare)
    assert made.req.stop == ("not one token",) and made.sampling["repetition_penalty"] == 1.1
    assert made.sampling["min_p"] == 0.05 and made.sampling["temperature"] == 0.6 and made.sampling["top_k"] == 20
    own_options = tiny.prepare(bare.with_(stop=("END",), min_p=0.2, repetition_penalty=1.3, temperature=0.1))
    assert own_options.req.stop == ("END",) and own_options.sampling["repetition_penalty"] == 1.3
    assert own_options.sampling["min_p"] == 0.2 and own_options.sampling["temperature"] == 0.1
    q4 = MLXBackend(found["tiny:q4"].path, "tiny:q4", lazy=True)  # no system or params layer: no defaults
    assert q4.default_system is None and q4.default_stop == () and q4.prepare(bare).req.stop == ()
    assert q4.card()["system"] is None and tiny.card()["system"] == SYSTEM_LAYER


CHATML_LEGACY = ("{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n"
                 "{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n")


def test_an_older_form_template_and_a_system_layer_reach_the_rendered_prompt(tmp_path, cache):
    """A GGUF without a template, served with the manifest's .Prompt/.Response template (Ollama's chatml of
    2024, in a layer of the older ``prompt`` media type) and a SYSTEM layer: the model's prompt is what Ollama would send it, history and all."""
    from mlx.core import load as mx_load

    from tinytitan.chat_request import ChatRequest, Message

    demo = ensure_demo_model()
    meta = tokenizer_metadata(demo)
    meta.pop("tokenizer.chat_template")
    gguf = write_gguf(tmp_path / "old.gguf", mx_load(str(demo / "model.safetensors")),
                      json.loads((demo / "config.json").read_text()), "qwen3", meta)
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    layers = [("model", blob(root, gguf.read_bytes())), ("prompt", blob(root, CHATML_LEGACY.encode())),
              ("system", blob(root, SYSTEM_LAYER.encode()))]
    manifest(root, "registry.ollama.ai/library/old/1b", layers, blob(root, json.dumps(CONFIG).encode()), 1_700_000_000)
    [served] = list_models(root, "float32")
    backend = MLXBackend(served.path, served.model_id, lazy=True)
    convo = (Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", "2+2?"))
    assert backend.encode(ChatRequest(model="old:1b", messages=convo))[0] == (
        f"<|im_start|>system\n{SYSTEM_LAYER}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        "Hello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_a_manifests_message_history_comes_before_the_conversation(library, cache):
    """The Modelfile's MESSAGE turns follow the leading system message (the request's own here) and precede
    the conversation, rendered by the manifest's translated template."""
    from tinytitan.chat_request import ChatRequest, Message

    root, _ = library
    coder = next(m for m in list_models(root, "float32") if m.model_id == "acme/coder:1b")
    backend = MLXBackend(coder.path, coder.model_id, lazy=True)
    req = ChatRequest(model=coder.model_id, messages=(Message("system", "Be brief."), Message("user", "hi")))
    assert backend.encode(req)[0] == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n"
        "A coder.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert backend.encode(req.with_(messages=req.messages[1:]))[0].startswith("<|im_start|>user\nWho are you?")

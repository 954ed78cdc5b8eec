"""Fill-in-the-middle over Ollama's API as editors use it: Continue reads whether a model takes ``suffix`` from
``/api/show`` (its template says ``.Suffix``; Ollama lists ``insert`` among its capabilities), then sends
``/api/generate`` with ``suffix``; a model without FIM is refused in Ollama's words."""

from __future__ import annotations

import httpx
import ollama
import pytest

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry, demo_tokenizer

MODEL = "tinytitan-scripted"
QWEN_FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]


def with_fim(markers: list[str]):
    tok = demo_tokenizer()  # a fresh copy: the shared one stays without FIM tokens
    tok.add_special_tokens({"additional_special_tokens": markers})
    return tok


async def shown(s) -> ollama.ShowResponse:
    return await ollama.AsyncClient(host=s.base).show(MODEL)


@pytest.mark.parametrize("markers, gap", [
    (QWEN_FIM, "<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>"),
    (["[PREFIX]", "[SUFFIX]", "[MIDDLE]"], "[SUFFIX]{{ .Suffix }}[PREFIX]{{ .Prompt }}"),
], ids=["qwen-coder", "codestral"])
async def test_show_says_a_model_with_fim_tokens_takes_a_suffix(serve, markers, gap):
    """Continue's Ollama provider: ``fimSupported = template.includes(".Suffix")``; without it Continue never
    sends this model a suffix. The template's fill-in branch is the model's own layout, as Ollama's templates
    for coder models have it, the chat template after it."""
    s = await serve(backend=Recording([ScriptEntry("x")], with_fim(markers), model_id=MODEL))
    show = await shown(s)
    assert "insert" in show.capabilities and ".Suffix" in show.template
    assert show.template.startswith("{{- if .Suffix }}" + gap + "{{- else }}") and "<|im_start|>" in show.template


async def test_show_says_neither_for_a_model_without_fim_tokens(serve, demo_tok):
    s = await serve(backend=Recording([ScriptEntry("x")], demo_tok, model_id=MODEL))
    show = await shown(s)
    assert "insert" not in show.capabilities and ".Suffix" not in show.template


@pytest.mark.parametrize("body", [{"prompt": "def f(", "suffix": "    return x"},
                                  {"prompt": "def f(", "suffix": "    return x", "stream": True},
                                  {"suffix": "    return x"}, {"raw": True, "suffix": "x"}],
                         ids=["generate", "streamed", "no-prompt", "raw"])
async def test_a_suffix_to_a_model_without_fim_is_refused_in_ollamas_words(serve, demo_tok, body):
    """Ollama checks the ``insert`` capability before it loads the model or reads the prompt, and answers 400
    ``<its full name> does not support insert``; an editor tells it from a failed completion by those words."""
    backend = Recording([ScriptEntry("x")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/generate"), json={"model": MODEL, "stream": False, **body})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    assert r.json()["error"].startswith(f"registry.ollama.ai/library/{MODEL}:latest does not support insert ('suffix'")
    with pytest.raises(ollama.ResponseError) as err:
        answer = await ollama.AsyncClient(host=s.base).generate(model=MODEL, **body)
        if body.get("stream"):  # (a stream's error is raised as it is read)
            [part async for part in answer]
    assert err.value.status_code == 400 and "does not support insert" in err.value.error
    assert backend.prompts == []


@pytest.mark.parametrize("sent", ["TinyTitan-Coder", "tinytitan-CODER:latest"])
async def test_the_insert_refusal_names_the_model_in_the_case_it_was_sent(serve, demo_tok, sent):
    """Ollama's ParseName keeps a name's case and its capability error prints it so (names compare in any case);
    the refusal once named the model in lower case, whatever was sent."""
    backend = Recording([ScriptEntry("x")], demo_tok, model_id="TinyTitan-Coder")
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/generate"), json={"model": sent, "prompt": "a", "suffix": "b", "stream": False})
    assert r.status_code == 400, r.text
    name = sent if ":" in sent else f"{sent}:latest"
    assert r.json()["error"].startswith(f"registry.ollama.ai/library/{name} does not support insert ('suffix'")
    assert backend.prompts == []

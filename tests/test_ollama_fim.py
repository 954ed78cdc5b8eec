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

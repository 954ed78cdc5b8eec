"""A raw prompt (Completions, Ollama ``raw``, fill-in-the-middle) opens as the tokenizer opens any text it
encodes whole: with Llama's, Gemma's or Mistral's BOS, which a chat template writes itself and a raw prompt
does not (as mlx-lm's, llama.cpp's and vLLM's completions do); a prompt that already opens with it gets no
second one; a tokenizer without one (Qwen's) adds nothing."""

from __future__ import annotations

import json
import shutil

from tinytitan.chat_request import ChatRequest
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.engine.prompt.tokenizer_facts import opening_tokens

import family_fixtures


def llama_with_bos(tmp_path):
    """The Llama 3 fixture's tokenizer, its post-processor adding BOS as Llama 3's own tokenizer.json does."""
    from mlx_lm.utils import load_tokenizer

    src = family_fixtures.build("llama3", tmp_path / "fixtures")
    out = tmp_path / "llama3-bos"
    shutil.copytree(src, out)
    spec = json.loads((out / "tokenizer.json").read_text())
    bos = "<|begin_of_text|>"
    bos_id = next(t["id"] for t in spec["added_tokens"] if t["content"] == bos)
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    (out / "tokenizer.json").write_text(json.dumps(spec))
    return load_tokenizer(out), bos_id


def raw(prompt: str) -> ChatRequest:
    return ChatRequest("m", (), prompt=prompt)


def test_a_raw_prompt_opens_with_the_tokenizers_bos(tmp_path):
    tok, bos = llama_with_bos(tmp_path)
    assert opening_tokens(tok) == (bos,)
    b = ScriptedBackend([ScriptEntry("x")], tok, model_id="m")
    _, tokens = b.encode(raw("The capital of France is"))
    assert tokens[0] == bos and tokens[1:] == tok.encode("The capital of France is", add_special_tokens=False)
    _, again = b.encode(raw("<|begin_of_text|>The capital of France is"))  # a prompt rendered by the client
    assert again == tokens


def test_a_tokenizer_without_an_opening_adds_nothing(demo_tok):
    assert opening_tokens(demo_tok) == ()
    b = ScriptedBackend([ScriptEntry("x")], demo_tok, model_id="m")
    assert b.encode(raw("def add(a, b):"))[1] == demo_tok.encode("def add(a, b):", add_special_tokens=False)

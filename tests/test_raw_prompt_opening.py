"""A raw prompt (Completions, Ollama ``raw``, fill-in-the-middle) opens as the tokenizer opens any text it
encodes whole: with Llama's, Gemma's or Mistral's BOS, which a chat template writes itself and a raw prompt
does not (as mlx-lm's, llama.cpp's and vLLM's completions do); a prompt that already opens with it gets no
second one; a tokenizer without one (Qwen's) adds nothing."""

from __future__ import annotations

from tinytitan.chat_request import ChatRequest
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry
from tinytitan.engine.prompt.tokenizer_facts import opening_tokens

from family_fixtures import llama_with_bos


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

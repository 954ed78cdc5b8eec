"""Bodies exactly as Ollama's own Go client (api/types.go: ``ShowRequest``, ``GenerateRequest``) writes them: the
fields without ``omitempty`` go out empty on every call, and the real server reads an empty one as absent.
``ollama run`` asks ``/api/show`` first, then loads the model with an empty ``/api/generate``."""

from __future__ import annotations

import httpx
import ollama

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry, demo_tokenizer

MODEL = "tinytitan-scripted"


async def test_the_go_clients_show_request_is_answered(serve):
    s = await serve(["x"])
    body = {"model": MODEL, "system": "", "template": "", "verbose": False, "options": None, "name": ""}
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/show"), json=body)
    assert r.status_code == 200, r.text
    assert r.json()["details"]["family"] == "qwen"
    async with httpx.AsyncClient() as h:  # a system prompt sent is the one shown, as Ollama's show answers
        r = await h.post(s.url("/api/show"), json={**body, "system": "Be terse."})
    assert r.status_code == 200 and r.json()["system"] == "Be terse."
    assert 'SYSTEM """Be terse."""' in r.json()["modelfile"]


async def test_the_go_clients_load_request_loads(serve):
    s = await serve(["never"])
    body = {"model": MODEL, "prompt": "", "suffix": "", "system": "", "template": "", "options": None}
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/generate"), json=body)
    assert r.status_code == 200, r.text
    assert r.json()["done_reason"] == "load"


async def test_an_empty_suffix_is_no_suffix(serve, demo_tok):
    """``ollama run <model> "<prompt>"`` (and every Go client, and ollama-python 0.3) sends ``"suffix": ""``:
    Ollama fills in the middle only for a non-empty suffix (server/routes.go: ``req.Suffix != ""``)."""
    backend = Recording([ScriptEntry("Hello.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    body = {"model": MODEL, "prompt": "hi", "suffix": "", "system": "", "template": "", "options": None,
            "stream": False}
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/generate"), json=body)
    assert r.status_code == 200, r.text
    assert r.json()["response"] == "Hello."
    assert backend.prompts == ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]


async def test_an_empty_suffix_is_not_fill_in_the_middle_on_a_model_that_has_it(serve):
    tok = demo_tokenizer()  # a fresh copy with fill-in-the-middle tokens
    tok.add_special_tokens({"additional_special_tokens": ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]})
    backend = Recording([ScriptEntry("Hello.")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await ollama.AsyncClient(host=s.base).generate(model=MODEL, prompt="hi", suffix="")
    assert r.response == "Hello."
    assert backend.prompts == ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]  # the chat template

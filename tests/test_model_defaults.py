"""A model's own defaults — its system prompt, its own turns and its stop strings (what an Ollama manifest's
``system``, ``messages`` and ``params`` layers give it) — apply the same on every protocol, because they
apply where the engine builds the prompt from the ChatRequest and where it decides the stops: a
conversation without a system message opens with the model's, then the model's turns; a request's own
system message (or ``system``, ``instructions``) wins; a request without stop strings stops at the model's;
a request's own replace them. Each body is checked against its SDK's models.
"""

from __future__ import annotations

import httpx
import pytest

import strict
from anthropic_util import HEADERS
from backends import Recording
from tinytitan.chat_request import Message
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
SYSTEM = "You are Tiny, a terse assistant."
ANSWER = "Hello STOP HERE world"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def server(serve, demo_tok):
    backend = Recording([ScriptEntry(ANSWER)], demo_tok, model_id=MODEL)
    backend.default_system, backend.default_stop = SYSTEM, ("STOP HERE",)
    backend.default_history = (Message("user", "Who are you?"), Message("assistant", "Tiny."))
    return await serve(backend=backend)


def opens_with(prompt: str, system: str) -> bool:
    """The system prompt, then the model's own turns."""
    return prompt.startswith(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
                             "<|im_start|>assistant\nTiny.<|im_end|>\n<|im_start|>user\nhi")


# each protocol's request for ``hi`` (own: with its own system text; stop: with its own stop string), and where
# its answer's text is
CASES = {
    "chat": ("/v1/chat/completions", lambda own, stop: {
        "model": MODEL, "messages": ([{"role": "system", "content": own}] if own else []) + HI,
        **({"stop": [stop]} if stop else {})},
        lambda b: strict.chat_completion(b).choices[0].message.content),
    "responses": ("/v1/responses", lambda own, stop: {"model": MODEL, "input": "hi", **({"instructions": own} if own else {})},
                  lambda b: strict.response(b).output_text),
    "messages": ("/v1/messages", lambda own, stop: {
        "model": MODEL, "max_tokens": 50, "messages": HI, **({"system": own} if own else {}),
        **({"stop_sequences": [stop]} if stop else {})},
        lambda b: strict.message(b).content[0].text),
    "ollama chat": ("/api/chat", lambda own, stop: {
        "model": MODEL, "stream": False, "messages": ([{"role": "system", "content": own}] if own else []) + HI,
        **({"options": {"stop": [stop]}} if stop else {})},
        lambda b: b["message"]["content"]),
    "ollama generate": ("/api/generate", lambda own, stop: {
        "model": MODEL, "stream": False, "prompt": "hi", **({"system": own} if own else {}),
        **({"options": {"stop": [stop]}} if stop else {})},
        lambda b: b["response"]),
}


@pytest.mark.parametrize("protocol", sorted(CASES))
async def test_the_models_system_prompt_opens_a_conversation_without_one(server, protocol):
    path, body, _ = CASES[protocol]
    async with httpx.AsyncClient(timeout=30) as c:
        for own in (None, "Be loud."):
            r = await c.post(server.url(path), json=body(own, None), headers=HEADERS)
            assert r.status_code == 200, r.text
            prompt = server.engine.backend.prompts[-1]
            assert opens_with(prompt, own or SYSTEM), prompt
            assert own is None or SYSTEM not in prompt


@pytest.mark.parametrize("protocol", sorted(CASES))
async def test_the_models_stop_strings_apply_unless_the_request_sends_its_own(server, protocol):
    path, body, text = CASES[protocol]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url(path), json=body(None, None), headers=HEADERS)
        assert r.status_code == 200, r.text
        assert text(r.json()) == "Hello "
        if protocol == "messages":  # the model's stop is the model ending its turn: not a stop_sequence it was sent
            assert (r.json()["stop_reason"], r.json()["stop_sequence"]) == ("end_turn", None)
        if protocol == "responses":  # Responses has no stop field: the model's own always apply
            return
        r = await c.post(server.url(path), json=body(None, "world"), headers=HEADERS)
        assert r.status_code == 200, r.text
        assert text(r.json()) == "Hello STOP HERE "
        if protocol == "messages":
            assert (r.json()["stop_reason"], r.json()["stop_sequence"]) == ("stop_sequence", "world")


async def test_counted_tokens_include_the_models_system_prompt(server):
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/v1/messages/count_tokens"), json={"model": MODEL, "messages": HI},
                         headers=HEADERS)
        made = await c.post(server.url("/v1/messages"), json={"model": MODEL, "max_tokens": 5, "messages": HI},
                            headers=HEADERS)
    counted = strict.tokens_count(r.json()).input_tokens
    prompt = server.engine.backend.prompts[-1]
    assert opens_with(prompt, SYSTEM)
    assert counted == strict.message(made.json()).usage.input_tokens == len(
        server.engine.backend.tokenizer.encode(prompt, add_special_tokens=False))


async def test_a_raw_prompt_has_no_system_prompt_but_stops_at_the_models_strings(server):
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/v1/completions"), json={"model": MODEL, "prompt": "Once"})
    assert strict.completion(r.json()).choices[0].text == "Hello "
    assert server.engine.backend.prompts[-1] == "Once"

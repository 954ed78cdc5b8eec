"""A grammar matcher that fails mid-generation ends the generation as a server error in the protocol's own
envelope (engine/structured/processor.py's GrammarFailed) — never an end-of-sequence that passes a broken
document off as ``stop``. The demo model decodes for real; its matcher is made to refuse its third token."""

from __future__ import annotations

import anthropic
import openai
import pytest

import anthropic_util
from responses_helpers import client as responses_client
from chat_helpers import client as chat_client
from tinytitan.engine.structured.compile import CompiledGrammar


class Refusing:
    """A matcher that refuses the ``n``-th token it is given (and is in error from then on)."""

    def __init__(self, inner, n: int = 3):
        self.inner, self.left, self.broken = inner, n, False

    def consume_token(self, token: int) -> bool:
        self.left -= 1
        if self.left <= 0:
            self.broken = True
            return False
        return self.inner.consume_token(token)

    def is_error(self) -> bool:
        return self.broken or self.inner.is_error()

    def get_error(self) -> str:
        return "refused on purpose" if self.broken else self.inner.get_error()

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def refusing(monkeypatch):
    real = CompiledGrammar.matcher
    monkeypatch.setattr(CompiledGrammar, "matcher", lambda self: Refusing(real(self)))


FMT = {"type": "json_object"}
USER = [{"role": "user", "content": "JSON please"}]


async def test_chat_completions(serve, demo_backend, refusing):
    s = await serve(backend=demo_backend)
    c = chat_client(s)
    with pytest.raises(openai.InternalServerError) as err:
        await c.chat.completions.create(model=demo_backend.model_id, messages=USER, response_format=FMT,
                                        max_tokens=20)
    assert err.value.body["type"] == "server_error" and "grammar" in err.value.body["message"]
    assert err.value.body["code"] is None
    finishes = []
    with pytest.raises(openai.APIError) as err:
        async for chunk in await c.chat.completions.create(model=demo_backend.model_id, messages=USER,
                                                           response_format=FMT, max_tokens=20, stream=True):
            finishes += [ch.finish_reason for ch in chunk.choices if ch.finish_reason]
    assert finishes == [] and "grammar" in str(err.value)  # no finish_reason: it did not "stop"
    assert err.value.body["type"] == "server_error" and err.value.body["code"] is None  # as the API's own


async def test_responses(serve, demo_backend, refusing):
    s = await serve(backend=demo_backend)
    events = []
    async for ev in await responses_client(s).responses.create(
            model=demo_backend.model_id, input="JSON please", store=False, max_output_tokens=20, stream=True,
            text={"format": {"type": "json_object"}}):
        events.append(ev)
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "server_error"
    assert "grammar" in events[-1].response.error.message


async def test_messages(serve, demo_backend, refusing):
    s = await serve(backend=demo_backend)
    with pytest.raises(anthropic.InternalServerError) as err:
        await anthropic_util.sdk(s).messages.create(
            model=demo_backend.model_id, max_tokens=20, messages=USER, tool_choice={"type": "any"},
            tools=[{"name": "f", "input_schema": {"type": "object"}}])
    assert err.value.body["error"]["type"] == "api_error" and "grammar" in err.value.body["error"]["message"]


class ErrorStateAcceptsEos:
    """llguidance's matcher in its error state: its mask allows only end-of-sequence, and consuming that returns
    True (a stopped matcher takes end-of-sequence) while ``is_error()`` stays True."""

    def __init__(self, inner, eos: int):
        self.inner, self.eos = inner, eos

    def consume_token(self, token: int) -> bool:
        return token == self.eos

    def is_error(self) -> bool:
        return True

    def get_error(self) -> str:
        return "mask computation failed"

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_matcher_in_error_that_takes_end_of_sequence_still_fails_the_generation(demo_backend):
    from tinytitan.chat_request import Grammar
    from tinytitan.engine.structured import GrammarMask, compile_grammar
    from tinytitan.engine.structured.processor import GrammarFailed

    compiled = compile_grammar(Grammar("json_schema", {"type": "object"}), demo_backend.tokenizer,
                               demo_backend.vocab_size)
    mask = GrammarMask(compiled)
    eos = mask.eos[0]
    mask.matcher = ErrorStateAcceptsEos(mask.matcher, eos)
    with pytest.raises(GrammarFailed, match="mask computation failed"):
        mask.consume(eos)

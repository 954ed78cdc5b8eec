"""Prompts too large to run are refused from a bound on every route that renders one — count_tokens included,
and a conversation of very many tiny turns too — without rendering or tokenizing them; a refused request's log
line says why; transformers' sequence-length warning stays out of the log."""

from __future__ import annotations

import logging

import anthropic
import httpx
import pytest
import trio

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

MODEL = "tinytitan-scripted"
WINDOW = 1000


@pytest.fixture
async def bounded(serve, demo_tok):
    """A server whose model has a 1,000-token window; ``s.encoded`` lists the turns of every prompt rendered."""
    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, context_window=WINDOW)
    s = await serve(backend=backend)
    s.encoded = []
    real = backend.timed_encode

    def timed_encode(req, *args, **kw):
        s.encoded.append(len(req.messages))
        return real(req, *args, **kw)

    backend.timed_encode = timed_encode
    return s


def client(s) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0)


async def test_count_tokens_on_a_prompt_that_cannot_fit_is_refused_unrendered(bounded):
    s = bounded
    big = "x" * (WINDOW * s.engine.backend.longest_token + 1)
    async with client(s) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": big}])
        assert caught.value.body["error"]["type"] == "invalid_request_error"
        assert "prompt is too long" in caught.value.body["error"]["message"]
        assert s.encoded == []
        # a prompt over the window but not provably so is still counted exactly
        over = "word " * (WINDOW + 50)
        n = await c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": over}])
        assert n.input_tokens > WINDOW and s.encoded == [1]


@pytest.mark.parametrize("route", ["count_tokens", "messages", "chat"])
async def test_very_many_tiny_turns_are_refused_unrendered(bounded, route):
    """Each turn's text is one character, far under the window in all; the turn markers the template writes
    around each (ChatML: two special tokens) are what put it over."""
    s = bounded
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"} for i in range(WINDOW + 1)]
    if route == "chat":
        async with httpx.AsyncClient(timeout=30) as h:
            r = await h.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": turns})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    else:
        async with client(s) as c:
            with pytest.raises(anthropic.BadRequestError) as caught:
                if route == "messages":
                    await c.messages.create(model=MODEL, max_tokens=5, messages=turns)
                else:
                    await c.messages.count_tokens(model=MODEL, messages=turns)
            assert "prompt is too long" in caught.value.body["error"]["message"]
    assert max(s.encoded, default=0) <= 4  # only the one-off measurement of the turn markers was rendered
    assert s.engine.backend.turn_markers == {"user": 2, "assistant": 2}


async def test_a_refused_requests_log_line_says_why(serve, caplog):
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve()
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(s.url("/v1/chat/completions"), json={"model": MODEL, "modalities": ["audio"],
                                                              "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400
        r = await h.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"},
                         json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400
    with trio.fail_after(10):  # a line is written once the response is sent
        while len(lines := [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.requests"
                            and " 400 " in rec.getMessage()]) < 2:
            await trio.sleep(0.01)
    (chat,) = [ln for ln in lines if ln.startswith("POST /v1/chat/completions 400")]
    assert " error=unsupported_value param=modalities " in chat, chat
    (messages,) = [ln for ln in lines if ln.startswith("POST /v1/messages 400")]
    assert " error=missing_required_parameter param=max_tokens " in messages, messages


async def test_the_sequence_length_warning_of_transformers_stays_out_of_the_log(serve, demo_tok):
    """The demo tokenizer says 32,768 tokens; the scripted model's window is 131,072: a 40,000-token prompt
    fits, and transformers would warn about 'indexing errors' that cannot happen."""
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    demo_tok.deprecation_warnings.pop("sequence-length-is-longer-than-the-specified-maximum", None)
    library = logging.getLogger("transformers.tokenization_utils_base")
    handler = Catch()
    library.addHandler(handler)
    try:
        s = await serve()
        async with client(s) as c:
            n = await c.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "word " * 40000}])
        assert n.input_tokens > demo_tok.model_max_length
    finally:
        library.removeHandler(handler)
    assert not [m for m in seen if "sequence length" in m], seen

"""A prompt that exactly fills the context window leaves no room for the answer's first token and is refused, in
each API's own words whose numbers say why: a prompt of N tokens is not "more than" a maximum of N (Claude Code
reads both numbers of Anthropic's sentence to size its compaction; litellm and pi match OpenAI's; Codex, pi and
opencode match the Responses API's own sentence and code). One token less is answered."""

from __future__ import annotations

import re

import httpx

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]
ANTHROPIC = {"anthropic-version": "2023-06-01"}


async def test_a_prompt_exactly_at_the_window_is_refused_with_numbers_that_hold(serve, demo_tok):
    probe = await serve(["x"])
    async with httpx.AsyncClient(timeout=30) as c:
        n = (await c.post(probe.url("/v1/chat/completions"), json={"model": MODEL, "messages": USER})).json()[
            "usage"]["prompt_tokens"]
        raw = (await c.post(probe.url("/v1/completions"), json={"model": MODEL, "prompt": "hi there"})).json()[
            "usage"]["prompt_tokens"]
        s = await serve(backend=ScriptedBackend([ScriptEntry("Hi.")] * 4, demo_tok, context_window=n))
        a = await c.post(s.url("/v1/messages"), json={"model": MODEL, "max_tokens": 100, "messages": USER},
                         headers=ANTHROPIC)
        o = await c.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": USER})
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": USER})
        raw_s = await serve(backend=ScriptedBackend([ScriptEntry("Hi.")] * 2, demo_tok, context_window=raw))
        p = await c.post(raw_s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi there"})
        roomy = await serve(backend=ScriptedBackend([ScriptEntry("Hi.")] * 2, demo_tok, context_window=n + 1))
        fits = await c.post(roomy.url("/v1/messages"), json={"model": MODEL, "max_tokens": 100, "messages": USER},
                            headers=ANTHROPIC)
    for got in (a, o, r, p):
        assert got.status_code == 400 and got.json()["error"]["code" if got is not a else "type"] in (
            "context_length_exceeded", "invalid_request_error"), got.text
    tokens, maximum = map(int, re.search(r"prompt is too long: (\d+) tokens > (\d+) maximum",
                                         a.json()["error"]["message"]).groups())
    assert (tokens, maximum) == (n, n - 1), a.json()
    message = r.json()["error"]["message"]
    assert message.startswith("Your input exceeds the context window of this model. Please adjust your input and try "
                              "again.") and f"The input is {n} tokens and fills the context window of {n}," in message
    assert r.json()["error"]["param"] == "input", r.json()
    for got, prompt in ((o, n), (p, raw)):
        message = got.json()["error"]["message"]
        window, requested = map(int, re.search(r"maximum context length is (\d+) tokens[.,] [Hh]owever,? you "
                                               r"requested (\d+) tokens", message).groups())
        assert (window, requested) == (prompt, prompt + 1) and f"({prompt} in " in message, message
    assert fits.status_code == 200 and fits.json()["usage"]["output_tokens"] == 1, fits.text

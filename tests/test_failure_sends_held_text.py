"""A generation that fails after its stream opened sends the text it generated before the failure whole: the
part a stop string held back while it might still match (and never did) goes out before the error, on every
protocol, as at any other end of an answer; and the failure is told once."""

from __future__ import annotations

import httpx
import pytest

from sse import parse_sse
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptedForward, ScriptEntry
from tinytitan.engine.engine import Engine
from tinytitan.events import Failed, Finished

MODEL = "tinytitan-scripted"
AH = {"anthropic-version": "2023-06-01", "x-api-key": "x"}
ANSWER = "Hello big World"
NEVER = "World!"  # a stop string that could match from "World" on, and never does
USER = [{"role": "user", "content": "hi"}]


def chat_text(text: str) -> str:
    return "".join(d["choices"][0]["delta"].get("content") or "" for _, d in parse_sse(text)
                   if isinstance(d, dict) and d.get("choices"))


def messages_text(text: str) -> str:
    return "".join(d["delta"].get("text") or "" for _, d in parse_sse(text)
                   if isinstance(d, dict) and d.get("type") == "content_block_delta")


def completions_text(text: str) -> str:
    return "".join(d["choices"][0].get("text") or "" for _, d in parse_sse(text)
                   if isinstance(d, dict) and d.get("choices"))


def ollama_text(text: str) -> str:
    import json

    lines = [json.loads(x) for x in text.splitlines() if x.strip()]
    return "".join((x.get("message") or {}).get("content") or "" for x in lines)


CASES = {
    "chat": ("/v1/chat/completions", {"messages": USER}, "stop", chat_text),
    "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 100}, "stop", completions_text),
    "messages": ("/v1/messages", {"messages": USER, "max_tokens": 100}, "stop_sequences", messages_text),
    "ollama": ("/api/chat", {"messages": USER}, "options.stop", ollama_text),
}


@pytest.mark.parametrize("protocol", sorted(CASES))
async def test_text_held_for_a_stop_string_goes_out_before_the_failure(serve, protocol):
    path, body, field, text_of = CASES[protocol]
    s = await serve([{"output": ANSWER, "error": "the model fell over"}])
    async with httpx.AsyncClient(timeout=30) as c:
        told = []
        for stop in (None, [NEVER]):
            b = {"model": MODEL, "stream": True, **body}
            if stop and field == "options.stop":
                b["options"] = {"stop": stop}
            elif stop:
                b[field] = stop
            r = await c.post(s.url(path), json=b, headers=AH)
            assert r.status_code == 200 and "the model fell over" in r.text
            told.append(text_of(r.text))
    assert told == [ANSWER, ANSWER]


async def test_a_decode_that_breaks_is_one_failure(demo_tok, monkeypatch):
    """A step that breaks (not one row's own failure) ends the row once: one Failed, after the text it held."""
    real, steps = ScriptedForward.run, []

    def breaking(self, plan, rows):
        steps.append(plan)
        if len(steps) == 8:  # the answer's last token ("orld") is not read: "Hello big W" was generated
            raise RuntimeError("the step broke")
        return real(self, plan, rows)

    monkeypatch.setattr(ScriptedForward, "run", breaking)
    told = []
    for stop in ((), (NEVER,)):
        steps.clear()
        backend = ScriptedBackend([ScriptEntry(ANSWER)], demo_tok)
        req = ChatRequest(model=MODEL, messages=(Message("user", "hi"),), stop=stop)
        async with Engine(backend).session(req) as events:
            got = [ev async for ev in events]
        endings = [ev for ev in got if isinstance(ev, (Finished, Failed))]
        assert len(endings) == 1 and got[-1] is endings[0] and "the step broke" in got[-1].message
        told.append("".join(getattr(ev, "text", "") for ev in got[1:-1]))
    assert told[0] == told[1] and told[0].endswith(" W"), told

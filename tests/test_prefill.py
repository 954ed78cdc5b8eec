"""A prefill: a final assistant message the answer continues. Messages (a final assistant turn with text, as
the API's older models take it), Ollama's chat (its templates leave that turn open) and Chat Completions'
``continue_final_message`` (vLLM's and SGLang's spelling) render the prompt cut where that message's text ends,
and answer with what follows it only. Bodies and events are checked against the SDKs' models."""

from __future__ import annotations

import httpx
import pytest

import strict
from anthropic_util import HEADERS
from backends import Recording
from sse import parse_sse
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.backends.scripted import ScriptEntry, demo_tokenizer
from tinytitan.memory.layer import continuation

MODEL = "tinytitan-scripted"
ASK = {"role": "user", "content": "Count to five."}
BEGUN = {"role": "assistant", "content": "One, two,"}
# the demo template (Qwen3's form) writes an answered turn's empty thought ahead of its text
CONTINUED = "<|im_start|>user\nCount to five.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nOne, two,"
NEW_TURN = CONTINUED + "<|im_end|>\n<|im_start|>assistant\n"
REST = " three, four, five."
THOUGHT = "Let me count.</think>\n\nOne, two, three."

CASES = {
    "messages": ("/v1/messages", {"model": MODEL, "max_tokens": 50, "messages": [ASK, BEGUN]},
                 lambda b: strict.message(b).content[0].text),
    "ollama": ("/api/chat", {"model": MODEL, "stream": False, "messages": [ASK, BEGUN]},
               lambda b: b["message"]["content"]),
    "chat": ("/v1/chat/completions", {"model": MODEL, "messages": [ASK, BEGUN], "continue_final_message": True,
                                      "add_generation_prompt": False},
             lambda b: strict.chat_completion(b).choices[0].message.content),
}


@pytest.fixture
async def server(serve, demo_tok):
    return await serve(backend=Recording([ScriptEntry(REST)] * 8, demo_tok, model_id=MODEL))


@pytest.fixture
async def thinking(serve, demo_tok):
    """A model whose answer closes a thought, then answers."""
    return await serve(backend=Recording([ScriptEntry(THOUGHT)] * 8, demo_tok, model_id=MODEL))


@pytest.mark.parametrize("protocol", sorted(CASES))
async def test_the_answer_continues_the_final_assistant_message(server, protocol):
    path, body, text = CASES[protocol]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url(path), json=body, headers=HEADERS)
    assert r.status_code == 200, r.text
    assert server.engine.backend.prompts[-1] == CONTINUED
    assert text(r.json()) == REST  # what follows the prefill, not the prefill again


async def test_a_streamed_prefill_and_its_count(server):
    path, body, _ = CASES["messages"]
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url(path), json={**body, "stream": True}, headers=HEADERS)
        counted = await c.post(server.url("/v1/messages/count_tokens"), json={"model": MODEL, "messages": [ASK, BEGUN]},
                               headers=HEADERS)
    events = [strict.message_event(data) for _, data in parse_sse(r.text)]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == REST
    assert server.engine.backend.prompts[-1] == CONTINUED
    start = next(e for e in events if e.type == "message_start")
    assert strict.tokens_count(counted.json()).input_tokens == start.message.usage.input_tokens == len(
        server.engine.backend.tokenizer.encode(CONTINUED, add_special_tokens=False))


async def test_without_a_prefill_the_final_assistant_message_is_history(server):
    """Chat without ``continue_final_message`` (OpenAI's own behaviour): a new assistant turn follows it.
    An empty final assistant turn begins nothing: Messages and Ollama open the answer as without it."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/v1/chat/completions"), json={"model": MODEL, "messages": [ASK, BEGUN]})
        assert r.status_code == 200, r.text
        assert server.engine.backend.prompts[-1] == NEW_TURN
        opened = []
        for path, body in (("/v1/messages", {"model": MODEL, "max_tokens": 9, "messages": [ASK]}),
                           ("/v1/messages", {"model": MODEL, "max_tokens": 9,
                                             "messages": [ASK, {"role": "assistant", "content": []}]}),
                           ("/api/chat", {"model": MODEL, "stream": False,
                                          "messages": [ASK, {"role": "assistant", "content": ""}]})):
            r = await c.post(server.url(path), json=body, headers=HEADERS)
            assert r.status_code == 200, r.text
            opened.append(server.engine.backend.prompts[-1])
    assert opened[0].endswith("<|im_start|>assistant\n") and opened == [opened[0]] * 3


@pytest.mark.parametrize("key", ["prefix", "partial"])
async def test_a_prefill_in_deepseeks_and_moonshots_spelling_is_continued(server, key):
    """DeepSeek's and Mistral's ``prefix: true`` and Moonshot's ``partial: true`` on the final assistant message
    (LiteLLM and aider send them so) ask what ``continue_final_message`` asks: the answer continues the message,
    streamed or not, never a new turn after it with the key dropped unseen."""
    import openai

    c = openai.AsyncOpenAI(base_url=server.url("/v1"), api_key="x", max_retries=0)
    messages = [ASK, {**BEGUN, key: True}]
    r = await c.chat.completions.create(model=MODEL, messages=messages)
    assert server.engine.backend.prompts[-1] == CONTINUED
    assert strict.chat_completion(r.model_dump()).choices[0].message.content == REST
    streamed = ""
    async for chunk in await c.chat.completions.create(model=MODEL, messages=messages, stream=True):
        streamed += "".join(ch.delta.content or "" for ch in chunk.choices)
    assert server.engine.backend.prompts[-1] == CONTINUED and streamed == REST


@pytest.mark.parametrize("messages, param", [
    ([{**ASK, "prefix": True}, BEGUN], "messages[0].prefix"),
    ([{**BEGUN, "partial": True}, ASK], "messages[0].partial"),
    ([ASK, {**BEGUN, "content": "", "prefix": True}], "messages[1]"),
    ([ASK, {**BEGUN, "prefix": "yes"}], "messages[1].prefix"),
])
async def test_a_prefill_key_that_cannot_be_continued_is_refused_by_name(server, messages, param):
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/v1/chat/completions"), json={"model": MODEL, "messages": messages})
    assert r.status_code == 400, r.text
    assert strict.openai_error(r.json()).param == param, r.text


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
REFUSED = [
    ("/v1/chat/completions", {"continue_final_message": True, "messages": [ASK]}, "messages[0]"),
    ("/v1/chat/completions", {"continue_final_message": True, "add_generation_prompt": True}, "add_generation_prompt"),
    ("/v1/chat/completions", {"add_generation_prompt": False}, "add_generation_prompt"),
    ("/v1/chat/completions", {"continue_final_message": True, "response_format": {"type": "json_object"}},
     "response_format"),
    ("/v1/chat/completions", {"continue_final_message": True, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tool_choice"),
    ("/v1/chat/completions", {"continue_final_message": True, "tools": [TOOL], "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}}, "tool_choice"),
    ("/api/chat", {"format": "json"}, "format"),
    ("/api/chat", {"tools": [TOOL], "tool_choice": {"type": "function", "name": "f"}}, "tool_choice"),
]


@pytest.mark.parametrize("path, change", [
    ("/api/chat", {}),
    ("/v1/chat/completions", {"continue_final_message": True}),
])
async def test_a_tool_choice_that_forces_no_call_leaves_a_prefill_continued(server, path, change):
    """``allowed_tools`` in mode auto restricts the tools the model may call, and forces none: the answer is
    still the prefill's continuation."""
    body = {"model": MODEL, "stream": False, "messages": [ASK, BEGUN], "tools": [TOOL], **change,
            "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]}}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url(path), json=body)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path, change, param", REFUSED)
async def test_a_prefill_that_cannot_be_continued_is_refused_by_name(server, path, change, param):
    body = {"model": MODEL, "stream": False, "messages": [ASK, BEGUN], **change}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url(path), json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert (error.get("param") == param) if isinstance(error, dict) else param in message, r.text
    assert "continue" in message, message


async def test_a_template_that_rewrites_the_message_cannot_continue_it(serve):
    tok = demo_tokenizer()  # a tokenizer of its own: its template is changed below
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    s = await serve(backend=Recording([ScriptEntry(REST)], tok, model_id=MODEL))
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/messages"), json=CASES["messages"][1], headers=HEADERS)
    assert r.status_code == 400, r.text
    assert "does not write the final assistant message (messages[1]) as sent" in r.json()["error"]["message"]


def test_a_memory_round_folds_the_prefill_into_the_turn_it_answered():
    """The memory layer answers its own calls and the model goes on: the prefill and the round's text are one
    assistant turn, and the next round opens a new answer after the results."""
    from tinytitan.memory.layer import Round

    req = ChatRequest(model=MODEL, messages=(Message("user", "Remember?"), Message("assistant", "Let me look.")),
                      continue_final=True)
    rnd = Round(frozenset())
    rnd.text.append(" Checking.")
    nxt = continuation(req, rnd, [], used_up=False)
    assert not nxt.continue_final
    assert [(m.role, m.content) for m in nxt.messages] == [("user", "Remember?"),
                                                           ("assistant", "Let me look. Checking.")]


async def test_a_template_refusal_names_the_clients_own_message(serve):
    """The 400 for a template that cannot continue the prefill names the prefill as the client sent it: with a
    top-level ``system`` (placed first among the request's messages) or two user messages merged into one turn,
    the prefill is still the client's messages[1] / messages[2]."""
    tok = demo_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    s = await serve(backend=Recording([ScriptEntry("x")], tok, model_id=MODEL))
    prefill = {"role": "assistant", "content": "One, two,"}
    async with httpx.AsyncClient(timeout=30) as c:
        for body, where in (({"system": "Be brief.", "messages": [ASK, prefill]}, "messages[1]"),
                            ({"messages": [ASK, ASK, prefill]}, "messages[2]")):
            r = await c.post(s.url("/v1/messages"), json={"model": MODEL, "max_tokens": 9, **body},
                             headers={"anthropic-version": "2023-06-01", "x-api-key": "x"})
            assert r.status_code == 400, r.text
            assert f"final assistant message ({where})" in r.json()["error"]["message"], r.text


async def test_a_prefill_that_opens_a_thought_is_continued_as_reasoning(thinking):
    """R1-style clients prefill ``<think>`` to make the model reason: the prompt then ends inside a thought
    (``starts_in_reasoning``), so what follows is reasoning up to ``</think>`` — never the marker as text."""
    prefill = {"role": "assistant", "content": "<think>"}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(thinking.url("/api/chat"), json={"model": MODEL, "stream": False, "think": True,
                                                         "messages": [ASK, prefill]})
        assert r.status_code == 200, r.text
        assert thinking.engine.backend.prompts[-1].endswith("<think>")
        message = r.json()["message"]
        assert (message.get("thinking"), message["content"]) == ("Let me count.", "One, two, three."), r.text
        r = await c.post(thinking.url("/v1/chat/completions"), json={
            "model": MODEL, "continue_final_message": True,
            "messages": [ASK, {**prefill, "content": "<think>\nHmm, "}]})
        assert r.status_code == 200, r.text
        m = strict.chat_completion(r.json()).choices[0].message
        assert "</think>" not in m.content and m.content == "One, two, three.", r.text
        assert r.json()["choices"][0]["message"].get("reasoning_content") == "Let me count.", r.text


async def test_a_fast_prefill_that_is_stripped_away_opens_a_new_turn(thinking):
    """The "-fast" path drops a turn left without text (scaffolding only): a prefill dropped so is no longer
    the final message, and the user's turn must not be continued in its place."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(thinking.url("/api/chat"), json={
            "model": MODEL + "-fast", "stream": False,
            "messages": [ASK, {"role": "assistant", "content": "<system-reminder>be brief</system-reminder>"}]})
    assert r.status_code == 200, r.text
    prompt = thinking.engine.backend.prompts[-1]
    assert "Count to five.<|im_end|>" in prompt and prompt.rstrip().endswith("</think>"), prompt[-80:]


async def test_a_fast_prefill_keeps_its_trailing_whitespace(server):
    """A prefill's last characters are where the answer goes on (code's indentation): the "-fast" path strips a
    turn's scaffolding and its ends, but not the end of the text the answer continues."""
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(server.url("/api/chat"), json={
            "model": MODEL + "-fast", "stream": False,
            "messages": [ASK, {"role": "assistant", "content": "def f():\n    "}]})
    assert r.status_code == 200, r.text
    assert server.engine.backend.prompts[-1].endswith("def f():\n    "), server.engine.backend.prompts[-1][-40:]

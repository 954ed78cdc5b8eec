"""Conversations each model family's template must render whole: a past call whose arguments are no JSON object
(a call cut short, sent back), parallel calls' results on a one-call-a-turn template (harmony), a system text with no
user turn after it on a template that writes it into the first user turn (Gemma, Mistral), and call ids a client
reuses across turns (Kimi)."""

from __future__ import annotations

import httpx
import pytest

import family_fixtures as ff
from tinytitan.chat_request import ChatRequest, Message, Tool, ToolCall

WEATHER = Tool("get_weather", "Get the weather", {"type": "object", "properties": {"city": {"type": "string"}}})
TIME = Tool("get_time", "Get the time", {"type": "object", "properties": {"tz": {"type": "string"}}})


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("family-rendering")


# 1. a past call whose arguments are not a JSON object (cut short by max_tokens, as the server itself sends them to
#    OpenAI clients) makes Qwen3-Coder's template raise a TypeError: a 500 on every later turn
async def test_non_object_arguments_sent_back_are_not_a_500(serve, root):
    backend = ff.backend("qwen3_coder", root, ["ok"])
    s = await serve(backend=backend)
    body = {"model": backend.model_id, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Par'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not valid JSON"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER.parameters}}]}
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/chat/completions"), json=body)
    # rendered again with the cut-short arguments as {} (what Messages and Ollama send for them): the loop goes on
    assert r.status_code == 200, r.text
    cut = (Message("user", "Weather in Paris?"), Message("assistant", "", (ToolCall("c1", "get_weather", '{"city": "Par'),)),
           Message("tool", "error: arguments are not valid JSON", tool_call_id="c1", name="get_weather"))
    text = backend.prepare(ChatRequest("m", cut, (WEATHER,))).prompt_text
    assert "<function=get_weather>\n</function>" in text and "error: arguments are not valid JSON" in text


# 2. gpt-oss: parallel calls are split one per turn, but the results all follow the last call, and harmony's
#    template names every result after the last call: the first result is attributed to the wrong tool
def test_harmony_parallel_results_keep_their_tool(root):
    b = ff.backend("gpt_oss", root)
    msgs = (Message("user", "Weather in Paris, and the time?"),
            Message("assistant", "", (ToolCall("call_1", "get_weather", '{"city": "Paris"}'),
                                      ToolCall("call_2", "get_time", '{"tz": "CET"}'))),
            Message("tool", "SUNNY", tool_call_id="call_1", name="get_weather"),
            Message("tool", "NOON", tool_call_id="call_2", name="get_time"))
    text = b.prepare(ChatRequest("m", msgs, (WEATHER, TIME))).prompt_text
    assert "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"SUNNY\"" in text
    assert "<|start|>functions.get_time to=assistant<|channel|>commentary<|message|>\"NOON\"" in text


# 3. Gemma (and the strict-alternation templates): a system message with no user turn after it is dropped (its text
#    is only ever written into the first user turn), and a conversation that opens with the assistant (a greeting)
#    is refused by the template's alternation check
@pytest.mark.parametrize("family", ["gemma", "mistral"])
def test_system_text_kept_without_a_user_turn(root, family):
    b = ff.backend(family, root)
    text = b.prepare(ChatRequest("m", (Message("system", "Write a haiku about autumn."),))).prompt_text
    assert "Write a haiku about autumn." in text
    greeted = (Message("system", "Be a pirate."), Message("assistant", "Ahoy! What be yer question?"),
               Message("user", "Where is the treasure?"))
    text = b.prepare(ChatRequest("m", greeted)).prompt_text
    assert "Be a pirate." in text and "Ahoy!" in text and "Where is the treasure?" in text


# 4. Kimi K2 Thinking: a call id a client reuses in a later turn gives the later call the earlier call's Kimi id,
#    which names the earlier call's function: the get_time call is written as functions.get_weather:0
def test_kimi_reused_call_id_keeps_each_calls_name(root):
    msgs = (Message("user", "U1"), Message("assistant", "", (ToolCall("call_0", "get_weather", '{"city": "Paris"}'),)),
            Message("tool", "SUNNY", tool_call_id="call_0", name="get_weather"), Message("assistant", "ok"),
            Message("user", "U2"), Message("assistant", "", (ToolCall("call_0", "get_time", '{"tz": "CET"}'),)),
            Message("tool", "NOON", tool_call_id="call_0", name="get_time"))
    text = ff.backend("kimi_k2_thinking", root).prepare(ChatRequest("m", msgs, (WEATHER, TIME))).prompt_text
    later = text[text.index("U2"):]
    assert "functions.get_weather" not in later
    assert '<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{"tz": "CET"}' in later
    assert "## Return of functions.get_time:1\nNOON" in later
    assert "## Return of functions.get_weather:0\nSUNNY" in text

"""Hunt repros: the memory layer and the client's output cap, tool_choice "none", a memory call whose arguments
are not complete JSON."""
from __future__ import annotations

import anthropic
import openai
import pytest

from anthropic_util import message
from responses_helpers import record_prompts
from memory_helpers import GET_CALL, SYSTEM, WEATHER, config
from tinytitan.memory.service import Memory

MODEL = "tinytitan-scripted"


def msgs(q="How do I build this?"):
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]


@pytest.mark.parametrize("protocol", ["chat", "messages"])
async def test_max_tokens_caps_the_whole_answer_across_memory_rounds(protocol, serve, tmp_path, demo_tok):
    first = "Let me look up the build command for you first.\n" + GET_CALL
    second = "word " * 200
    s = await serve([first, second], memory=Memory(config(tmp_path)))
    prompts = record_prompts(s)
    if protocol == "chat":
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
            r = await c.chat.completions.create(model=MODEL, messages=msgs(), max_tokens=60)
        text, used, finish = r.choices[0].message.content, r.usage.completion_tokens, r.choices[0].finish_reason
    else:
        async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0) as c:
            m = await message(c, True, model=MODEL, max_tokens=60, system=SYSTEM,
                              messages=[{"role": "user", "content": "How do I build this?"}])
        text, used, finish = m.content[0].text, m.usage.output_tokens, m.stop_reason
    assert len(prompts) == 2 and finish in ("length", "max_tokens")
    assert len(demo_tok.encode(text, add_special_tokens=False)) <= 60  # what the client was sent
    assert used == 60  # what it is billed: every round, within its cap


async def test_tool_choice_none_offers_no_memory_tools(serve, tmp_path):
    """With tool_choice "none" no tool is declared to the model: the fragment must not tell it to call memory
    tools (a call it makes anyway reaches the client as raw markup)."""
    s = await serve([GET_CALL, "After."], memory=Memory(config(tmp_path)))
    prompts = record_prompts(s)
    async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
        await c.chat.completions.create(model=MODEL, messages=msgs(), tools=[{"type": "function", "function": WEATHER}],
                                        tool_choice="none")
    text = prompts[0].prompt_text
    assert '"name": "memory_get"' not in text  # not declared ...
    assert "Memory tools: memory_search" not in text and "There are no memory tools" in text  # ... nor promised


@pytest.mark.parametrize("stream", [True, False])
async def test_a_memory_call_with_broken_json_is_answered_with_a_tool_error(stream, serve, tmp_path):
    bad = '<tool_call>\n{"name": "memory_get", "arguments": {"key": "a"\n</tool_call>'
    s = await serve([bad, "After the error."], memory=Memory(config(tmp_path)))
    prompts = record_prompts(s)
    async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
        if stream:
            text, finish = "", None
            async for ch in await c.chat.completions.create(model=MODEL, messages=msgs(), stream=True):
                for x in ch.choices:
                    text += x.delta.content or ""
                    finish = x.finish_reason or finish
        else:
            r = await c.chat.completions.create(model=MODEL, messages=msgs())
            text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert len(prompts) == 2 and "cut short" in prompts[1].prompt_text.split("memory_get")[-1]
    assert (text, finish) == ("After the error.", "stop")

"""A model whose template and vocabulary carry no tool markup (SmolLM2-135M-Instruct, `--model smollm2`): the
server writes a tool preamble into the system text asking for a bare JSON call, and a call written exactly as
the preamble asks is read as a call (the generic family's parser takes a bare JSON call), not sent as text."""

from __future__ import annotations

import httpx

from conftest import entries
from tinytitan.engine.backends.scripted import ScriptedBackend
from tinytitan.engine.families import detect
from tinytitan.events import ToolCallStarted

SMOLLM2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                    "{% endif %}")


class Tok:
    chat_template = SMOLLM2_TEMPLATE

    def get_vocab(self):
        return {"<|im_start|>": 1, "<|im_end|>": 2, "<": 3, "tool": 4, "_call": 5, ">": 6}


TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


def test_a_call_written_as_the_preamble_asks_is_read_as_a_call():
    fam = detect(Tok(), {"model_type": "llama"})
    assert fam.name == "generic"
    msgs, tools = fam.map_roles([{"role": "user", "content": "read notes.txt"}], TOOLS, SMOLLM2_TEMPLATE)
    preamble = msgs[0]["content"]
    assert tools is None and "read" in preamble  # the tools went into the system text
    # what the preamble tells the model to write:
    assert '{"name": "function_name", "arguments": {"parameter": "value"}}' in preamble, preamble
    out = '{"name": "read", "arguments": {"path": "notes.txt"}}'
    parser = fam.parser(tools={"read": TOOLS[0]["function"]})
    events = []
    for ch in out:
        events += parser.feed(ch)[0]
    events += parser.finish()
    assert any(isinstance(e, ToolCallStarted) for e in events), events


# an ordinary JSON answer whose keys happen to be "name" and "parameters" (the function definition the user asked
# for) names no offered tool: it is text, not a call to a tool the client never offered
ANSWER = '{"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}'


async def test_a_json_answer_naming_no_offered_tool_is_text(serve, demo_tok):
    backend = ScriptedBackend(entries([ANSWER]), demo_tok)
    backend._family = detect(Tok(), {"model_type": "llama"})
    assert backend.family.name == "generic"
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as c:
        r = await c.post(f"{s.base}/v1/chat/completions", json={
            "model": "tinytitan-scripted", "tools": TOOLS,
            "messages": [{"role": "user", "content": "Write the OpenAI function definition of a weather tool."}]})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert choice["message"]["content"] == ANSWER

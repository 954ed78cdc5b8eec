"""Chat Completions helpers shared by the tests: the scripted model's name, a user turn, a tool, a reasoning +
text + tool-call script, and an openai SDK client for a server."""

from __future__ import annotations

import openai


MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                             "parameters": {"type": "object",
                                                            "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}]
THINK_TEXT_TOOL = ('<think>\nThe user wants weather.\n</think>\n\nLet me check.\n\n<tool_call>\n'
                   '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)

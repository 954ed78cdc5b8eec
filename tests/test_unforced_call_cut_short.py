"""An unforced call cut short by max_tokens before its name is whole: its raw markup must not become the
answer's text (a forced one is already kept out: test_forced_call_cut_short.py)."""

from __future__ import annotations

import pytest

from anthropic_util import body, post

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


@pytest.mark.parametrize("cap", [6, 9, 12])
async def test_unforced_call_cut_short_leaks_no_markup(serve, cap):
    s = await serve(["Sure. " + CALL])
    d = (await post(s, body(tools=TOOLS, max_tokens=cap))).json()
    assert d["stop_reason"] == "max_tokens"
    text = "".join(b.get("text", "") for b in d["content"])
    assert "<tool_call>" not in text, d["content"]

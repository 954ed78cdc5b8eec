"""clear_tool_uses keeps the ``keep`` most recent tool uses — all of them where there are fewer than that."""

from __future__ import annotations

import pytest

from context_editing_helpers import ask_with_edits, tool_result_conversation
from responses_helpers import record_prompts


@pytest.mark.parametrize("n,keep", [(2, 3), (1, 2), (3, 5)])
async def test_fewer_tool_uses_than_keep_clears_none(serve, n, keep):
    s = await serve(["Done."])
    prompts = record_prompts(s)
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 50},
            "keep": {"type": "tool_uses", "value": keep}}
    applied, prompt = await ask_with_edits(s, False, [edit], tool_result_conversation(n), prompts)
    assert applied == {"applied_edits": []}, applied
    assert all(f"RESULT-{i}" in prompt for i in range(n))

"""With memory on, a conversation's prompt cache stays warm turn after turn, on the real decode path (the demo
model), even when memory changes between its turns (another agent writes to the workspace): the fragment sits in
the system prompt, so a fragment that moved would make every turn a full re-read."""

from __future__ import annotations

import anthropic
import openai
import pytest

from memory_helpers import SYSTEM, config, on_disk
from tinytitan.memory.service import Memory


@pytest.mark.parametrize("protocol", ["chat", "messages", "responses"])
async def test_three_turns_read_the_cache_though_memory_changes(protocol, serve, demo_backend, tmp_path):
    cfg = config(tmp_path)
    ws = on_disk(cfg.directory)
    ws.set("build/command", "make -j2")
    s = await serve(backend=demo_backend, memory=Memory(cfg))
    model = demo_backend.model_id
    system = f"{protocol} agent. {SYSTEM}"  # (the demo model's cache is the test session's: a prompt of its own)
    question = "How do I build this?"
    msgs: list[dict] = [{"role": "user", "content": question}]
    seen, prev = [], None
    for turn in range(3):
        if protocol == "chat":
            async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
                r = await c.chat.completions.create(model=model, max_tokens=6, temperature=0,
                                                    messages=[{"role": "system", "content": system}, *msgs])
            text = r.choices[0].message.content
            seen.append((r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens))
        elif protocol == "messages":
            async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0) as c:
                r = await c.messages.create(model=model, system=system, messages=msgs, max_tokens=6)
            text = "".join(b.text for b in r.content if b.type == "text")
            cached = r.usage.cache_read_input_tokens or 0
            seen.append((r.usage.input_tokens + cached, cached))
        else:
            async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
                r = await c.responses.create(model=model, instructions=system, input=msgs[-1]["content"],
                                             previous_response_id=prev, max_output_tokens=16)
            prev, text = r.id, r.output_text
            seen.append((r.usage.input_tokens, r.usage.input_tokens_details.cached_tokens))
        msgs += [{"role": "assistant", "content": text or "-"}, {"role": "user", "content": f"And step {turn}?"}]
        ws.set(f"notes/turn-{turn}", f"written by another agent after turn {turn}")  # memory changes meanwhile
    ws.db.close()
    for (before, _), (now, cached) in zip(seen, seen[1:]):
        # every later turn reads the whole earlier prompt from the cache (all but its final few ids: the answer's
        # opening, which the next turn's template may write differently)
        assert cached >= before - 8 and now > before, seen

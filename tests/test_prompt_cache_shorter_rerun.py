"""An entry that holds all of a later, shorter generation over the same prompt does not give way to it (in memory
and on disk): a retry with a smaller max_tokens, a stop string, or a duplicate whose client left, ends inside the
entry's answer and parts from nothing; the tool loop's next turn still reads its prompt from the longer entry."""

from __future__ import annotations

import httpx
import numpy as np

from anthropic_util import MODEL
from conftest import entries
from tinytitan.engine.cache.entries import PromptFacts
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.backends.scripted import ScriptedBackend

THINK = "<think>\nI should read the file a.py to see what it holds.\n</think>\n\n"
CALL = '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>'
TOOL = {"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


def test_a_shorter_generation_over_the_same_prompt_leaves_the_longer_entry():
    cache = PromptCache(1 << 30)
    prompt, answer = list(range(100, 140)), list(range(500, 530))
    cache.store(prompt + answer, None, facts=PromptFacts(len(prompt)))
    cache.store(prompt + answer[:3], None, facts=PromptFacts(len(prompt)))  # the same prompt, ended sooner
    assert cache.fetch(prompt + answer + [7])[1] == len(prompt) + len(answer)


async def test_a_retry_that_ends_sooner_keeps_the_tool_loops_entry(serve, demo_tok):
    backend = ScriptedBackend(entries([THINK + CALL, THINK + CALL, "Done."]), demo_tok,
                              prompt_cache=PromptCache(1 << 30))
    s = await serve(backend=backend)
    msgs = [{"role": "system", "content": "You are a careful agent."}, {"role": "user", "content": "Look at a.py"}]
    body = {"model": MODEL, "messages": msgs, "tools": [TOOL], "temperature": 0}
    async with httpx.AsyncClient(timeout=30) as c:
        first = (await c.post(s.url("/v1/chat/completions"), json=body)).json()
        held = max(len(e.tokens) for e in backend.prompt_cache.entries.values())  # the prompt and the call
        # the same turn again, cut short (a retry with a smaller max_tokens, or one its client left)
        await c.post(s.url("/v1/chat/completions"), json={**body, "max_tokens": 4})
        m = first["choices"][0]["message"]
        loop = msgs + [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "x = 1"}]
        nxt = (await c.post(s.url("/v1/chat/completions"), json={**body, "messages": loop})).json()
    cached = nxt["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= held, (cached, held)


def test_a_shorter_generation_over_the_same_prompt_leaves_the_longer_file(tmp_path):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.prompt.splice import Span

    def put(disk, prompt, answer):
        ids = prompt + answer
        kv = KVCache()
        kv.update_and_fetch(mx.zeros((1, 1, len(ids), 8)), mx.zeros((1, 1, len(ids), 8)))
        disk.put(np.array(ids, dtype=np.int64), [kv], (Span(len(prompt), "p"), Span(len(answer), "a", True)))
        assert disk.flush()

    prompt, answer = list(range(1000, 1080)), list(range(500, 530))
    disk = PromptDisk(tmp_path, [], lambda: "layout", 1 << 30)
    put(disk, prompt, answer)
    put(disk, prompt, answer[:3])  # the same prompt, ended sooner
    assert disk.best(np.array(prompt + answer + [7], dtype=np.int64))[1] == len(prompt) + len(answer)

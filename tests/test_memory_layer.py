"""The memory layer in the request path, over every protocol (Chat Completions, Responses, Messages, Ollama),
with the scripted backend: a model that writes a fact in one conversation reads it in another (across a server
restart); the client sees neither call; a client tool call ends the loop; the rounds cap; the workspace
header; memory off leaves requests alone."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
import trio

from responses_helpers import record_prompts
from tinytitan.memory.layer import USED_UP
from tinytitan.store.db import SqliteDatabase, db_path
from memory_helpers import (
    FACT, GET_CALL, MODEL, PROTOCOLS, SET_CALL, SYSTEM, WEATHER, config, converse, memory_server, on_disk)

WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def tokens(demo_tok, *outputs: str) -> int:
    return sum(len(demo_tok.encode(o, add_special_tokens=False)) for o in outputs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_two_conversations_share_a_fact_across_a_restart(protocol, tmp_path, demo_tok):
    cfg = config(tmp_path)
    said = "Noted: the build command is saved."
    async with memory_server(demo_tok, [SET_CALL, said], cfg) as s:
        prompts = record_prompts(s)
        first = await converse(s, protocol, stream=True)
    assert first["text"] == said and first["calls"] == [] and first["finish"] in ("stop", "end_turn", "completed")
    assert len(prompts) == 2  # the memory call was answered here and the model went on
    assert "# Memory" in prompts[0].prompt_text and "Memory is empty" in prompts[0].prompt_text
    assert '"saved": "build/command"' in prompts[1].prompt_text
    assert first["output_tokens"] == tokens(demo_tok, SET_CALL, said)  # usage counts every round
    if protocol == "chat":
        assert first["prompt_tokens"] == sum(len(p.tokens) for p in prompts)
    # the scope is the working directory the client declared; the record is in the database
    assert on_disk(cfg.directory).get("build/command").value == FACT

    answer = "The build command is make -j2."
    async with memory_server(demo_tok, [GET_CALL, answer], cfg) as s:  # a new server: replayed from disk
        prompts = record_prompts(s)
        second = await converse(s, protocol, stream=False)
    assert second["text"] == answer and second["calls"] == []
    assert f"- build/command (importance 4): {FACT}" in prompts[0].prompt_text  # the bootstrap lists it
    assert json.dumps(FACT)[1:-1] in prompts[1].prompt_text.split("memory_get")[-1]  # the get's result
    assert second["output_tokens"] == tokens(demo_tok, GET_CALL, answer)
    if protocol == "responses":
        assert second["items"] == ["message"]  # no function_call item of the server's own


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_client_tool_call_ends_the_loop(protocol, tmp_path, demo_tok):
    both = SET_CALL + "\n" + WEATHER_CALL  # a memory call and a client call in one turn
    async with memory_server(demo_tok, [both, "never reached"], config(tmp_path)) as s:
        prompts = record_prompts(s)
        out = await converse(s, protocol, stream=True, tools=[WEATHER])
        assert on_disk(tmp_path / "memory").get("build/command").value == FACT  # the memory call beside it ran
    assert len(prompts) == 1
    assert [c["name"] for c in out["calls"]] == ["get_weather"]
    assert json.loads(out["calls"][0]["arguments"]) == {"city": "Paris"}
    assert out["finish"] in ("tool_calls", "tool_use")
    assert "memory_set" not in json.dumps(out)


async def test_the_rounds_cap(tmp_path, demo_tok):
    async with memory_server(demo_tok, [GET_CALL], config(tmp_path, rounds=2)) as s:  # it never stops calling
        prompts = record_prompts(s)
        out = await converse(s, "chat", stream=True)
    assert len(prompts) == 3  # two rounds answered, then one more generation, whose call is dropped
    assert USED_UP not in prompts[1].prompt_text and USED_UP in prompts[2].prompt_text
    # the tools stay in the request: each round's prompt extends the one before it
    assert prompts[1].tokens[: len(prompts[0].tokens)] == prompts[0].tokens
    assert prompts[2].tokens[: len(prompts[1].tokens)] == prompts[1].tokens
    assert out == {"text": "", "calls": [], "finish": "stop", "output_tokens": tokens(demo_tok, GET_CALL) * 3,
                   "prompt_tokens": sum(len(p.tokens) for p in prompts)}


async def test_the_workspace_header_picks_the_workspace(tmp_path, demo_tok):
    cfg = config(tmp_path)
    async with memory_server(demo_tok, [SET_CALL, "ok"], cfg) as s:
        await converse(s, "messages", stream=False, headers={"X-TinyTitan-Workspace": "/src/from-header"})
    assert on_disk(cfg.directory, "/src/from-header").get("build/command").value == FACT
    db = SqliteDatabase(db_path(cfg.directory))
    assert db.run(lambda tx: tx.rows("SELECT path FROM memory_workspaces")) == [("/src/from-header",)]


async def test_tools_off_only_shows_memory(tmp_path, demo_tok):
    cfg = config(tmp_path, tools="off")
    on_disk(cfg.directory).set("build/command", FACT)
    async with memory_server(demo_tok, ["Use make -j2."], cfg) as s:
        prompts = record_prompts(s)
        out = await converse(s, "chat", stream=False)
    assert out["text"] == "Use make -j2."
    assert "There are no memory tools" in prompts[0].prompt_text and FACT in prompts[0].prompt_text
    assert "memory_get" not in prompts[0].prompt_text


async def test_a_second_server_on_the_workspace_shares_its_memory(tmp_path, demo_tok):
    cfg = config(tmp_path)
    async with memory_server(demo_tok, [SET_CALL, "Saved."], cfg) as first:
        await converse(first, "chat", stream=False)
        async with memory_server(demo_tok, ["two"], cfg) as second:  # one database, two servers
            prompts = record_prompts(second)
            await converse(second, "chat", stream=False)
    assert "will not outlive it" not in prompts[0].prompt_text
    assert f"- build/command (importance 4): {FACT}" in prompts[0].prompt_text


async def test_memory_off_leaves_requests_alone(serve):
    s = await serve(["Hello."])
    prompts = record_prompts(s)
    out = await converse(s, "chat", stream=False)
    assert out["text"] == "Hello." and "# Memory" not in prompts[0].prompt_text
    assert not hasattr(s.engine, "memory")


def test_the_flag_builds_the_layer_only_when_asked(tmp_path, monkeypatch):
    from tinytitan.flags import build_parser
    from tinytitan.serve import open_memory

    monkeypatch.delenv("TINYTITAN_MEMORY", raising=False)
    assert open_memory(build_parser().parse_args(["serve"])) is None
    monkeypatch.setenv("TINYTITAN_MEMORY", "1")
    monkeypatch.chdir(tmp_path)
    memory = open_memory(build_parser().parse_args(["serve", "--memory-dir", str(tmp_path / "m"),
                                                    "--memory-tools", "minimal", "--memory-tool-rounds", "2",
                                                    "--memory-fsync", "--memory-max-workspaces", "7"]))
    try:
        assert (memory.config.tools, memory.config.rounds, memory.config.max_workspaces) == ("minimal", 2, 7)
        assert memory.config.directory == tmp_path / "m" and memory.db.where == str(tmp_path / "m" / "state.db")
    finally:
        memory.close()


def test_tinytitan_serve_with_memory(tmp_path):
    """The real command: --memory wires the layer, the write is on disk once the server stopped."""
    from cli_helpers import start

    script = tmp_path / "s.yaml"
    script.write_text(json.dumps([SET_CALL, "Saved."]))
    proc, model, base, _ = start(["--script", str(script), "--memory", "--memory-dir", str(tmp_path / "m"),
                                  "--memory-tool-rounds", "1"])
    try:
        c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
        r = c.chat.completions.create(model=model, messages=[{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": "remember"}])
        assert r.choices[0].message.content == "Saved." and not r.choices[0].message.tool_calls
    finally:
        proc.terminate()
        proc.wait(10)
    from tinytitan.memory.scope import os_user

    assert on_disk(tmp_path / "m", user=os_user()).get("build/command").value == FACT


async def test_a_continuation_is_never_refused_as_overloaded():
    from tinytitan.engine.admission import Admission
    from tinytitan.errors import ApiError

    admission = Admission(1, max_queue=1)
    admission.admit()
    admission.admit()  # one waits beyond the free slot: the queue is full
    with pytest.raises(ApiError):
        admission.admit()
    admission.admit(continuing=True)  # a memory round of a request already in waits its turn instead
    assert admission.waiting == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [True, False])
async def test_thinking_and_text_on_both_sides_of_a_memory_round(protocol, stream, tmp_path, demo_tok):
    """Text before a memory call reaches the client; the continuation's thinking and text follow it in the same
    answer, in each protocol's own grammar (the SDKs parse every event)."""
    first = "<think>\nMaybe memory knows.\n</think>\n\nLet me look.\n" + GET_CALL
    second = "<think>\nNothing stored.\n</think>\n\nI do not know yet."
    async with memory_server(demo_tok, [first, second], config(tmp_path)) as s:
        prompts = record_prompts(s)
        out = await converse(s, protocol, stream=stream)
    assert len(prompts) == 2 and '"found": false' in prompts[1].prompt_text
    assert out["text"].replace("\n", "") == "Let me look.I do not know yet."
    assert out["calls"] == [] and out["output_tokens"] == tokens(demo_tok, first, second)


async def test_count_tokens_counts_the_prompt_memory_sends(tmp_path, demo_tok, serve):
    body = {"model": MODEL, "system": SYSTEM, "messages": [{"role": "user", "content": "How do I build this?"}]}
    plain = await serve(["x"])
    async with memory_server(demo_tok, ["x"], config(tmp_path)) as s:
        async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0) as c:
            with_memory = (await c.messages.count_tokens(**body)).input_tokens
            prompts = record_prompts(s)
            await c.messages.create(max_tokens=16, **body)
    async with anthropic.AsyncAnthropic(base_url=plain.base, api_key="x", max_retries=0) as c:
        without = (await c.messages.count_tokens(**body)).input_tokens
    assert with_memory == len(prompts[0].tokens) > without


async def test_a_raw_prompt_is_left_alone(tmp_path, demo_tok):
    async with memory_server(demo_tok, ["def add(a, b): return a + b"], config(tmp_path)) as s:
        prompts = record_prompts(s)
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
            r = await c.completions.create(model=MODEL, prompt="# add two numbers\n", max_tokens=32)
    assert r.choices[0].text == "def add(a, b): return a + b"
    assert prompts[0].prompt_text == "# add two numbers\n" and not prompts[0].req.tools


def test_the_rounds_timing_is_summed():
    from tinytitan.events import Timing
    from tinytitan.memory.layer import add_timing

    a = Timing(admission_wait_s=0.5, prefill_s=1.0, prefill_tokens=10, decode_s=2.0, decode_tokens=5)
    b = Timing(admission_wait_s=0.25, load_s=3.0, prefill_s=0.5, prefill_tokens=4, decode_s=1.0, decode_tokens=7)
    assert add_timing(a, b) == Timing(admission_wait_s=0.75, load_s=3.0, prefill_s=1.5, prefill_tokens=14,
                                      decode_s=3.0, decode_tokens=12)
    assert add_timing(None, b) is b and add_timing(a, None) is a and add_timing(None, None) is None


@pytest.mark.parametrize("client, path", [("claude", "/v1/messages"), ("codex", "/v1/responses")])
async def test_the_real_clients_working_directory_is_the_workspace(client, path, tmp_path, demo_tok):
    """What Claude Code and Codex really send (tests/traces) names the workspace: the directory they ran in."""
    import httpx
    from trace_replay_helpers import TRACES, load_trace, replay

    (record,) = [r for r in load_trace(TRACES / client / "plain.jsonl") if r["path"] == path][:1]
    async with memory_server(demo_tok, ["Hello."], config(tmp_path)) as s:
        memory, scoped = s.engine.memory, []
        real = memory.session

        def session(req):
            made = real(req)
            scoped.append(made.scope.path)
            return made

        memory.session = session
        async with httpx.AsyncClient(timeout=60) as h:
            assert (await replay(h, s, record, MODEL)).status_code == 200
    assert set(scoped) == {"/tmp/tt-trace/work"}


async def test_a_client_that_hangs_up_during_a_continuation_frees_its_place(tmp_path, demo_tok):
    import httpx

    slow = {"output": "A long answer that the client will not wait for, word after word.", "delay_ms": 200}
    async with memory_server(demo_tok, [GET_CALL, slow, "Next."], config(tmp_path)) as s:
        body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(timeout=30) as h:
            async with h.stream("POST", s.url("/v1/chat/completions"), json=body) as r:
                async for chunk in r.aiter_text():
                    if '"content":"A' in chunk.replace(" ", ""):  # the continuation is decoding
                        break
        with trio.fail_after(10):
            while s.engine.running or s.engine.waiting:
                await trio.sleep(0.02)
        decoded = s.engine.backend.tokens_decoded
        with trio.fail_after(10):  # its record is kept once its HTTP request has ended
            while not s.server.observer.recent():
                await trio.sleep(0.02)
        [cancelled] = s.server.observer.recent()
        out = await converse(s, "chat", stream=False)
    assert decoded < tokens(demo_tok, GET_CALL, slow["output"])  # the continuation stopped when the client left
    assert out["text"] == "Next."
    # what it decoded is counted (metrics, log line, dashboard): the memory round and the continuation's part
    assert cancelled["stop_reason"] == "cancelled"
    assert tokens(demo_tok, GET_CALL) < cancelled["completion_tokens"] <= decoded


async def test_a_conversation_keeps_its_fragment_a_new_one_sees_new_facts(tmp_path, demo_tok):
    """A write does not move the prompt prefix of the conversation that made it (the prompt cache keeps
    working); the next conversation's fragment lists the fact."""
    async with memory_server(demo_tok, [SET_CALL, "Saved.", "Second turn.", "Fresh."], config(tmp_path)) as s:
        prompts = record_prompts(s)
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
            turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How do I build this?"}]
            first = await c.chat.completions.create(model=MODEL, messages=turn)
            turn += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "And then?"}]
            await c.chat.completions.create(model=MODEL, messages=turn)
            await c.chat.completions.create(model=MODEL, messages=[{"role": "system", "content": SYSTEM},
                                                                   {"role": "user", "content": "What is here?"}])
    assert len(prompts) == 4  # the first request ran a memory round
    opening = prompts[0].prompt_text.split("How do I build this?")[0]
    assert "Memory is empty" in opening and prompts[2].prompt_text.startswith(opening)
    assert f"- build/command (importance 4): {FACT}" in prompts[3].prompt_text

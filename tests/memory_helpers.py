"""The memory layer's test helpers: the scripted model's facts and calls, a memory configuration and its
workspace on disk, a server with memory on, and one conversation in each protocol; for consolidation, the
model's answer (ANSWER, FACTS as read from it), the workspace of a configuration, and a wait for the
consolidator's passes; req: a request whose system messages (or workspace header) name its workspace."""

from __future__ import annotations

import functools
import json
from contextlib import asynccontextmanager

import anthropic
import ollama
import openai
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from anthropic_util import message
from conftest import Running, entries
from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.engine import Engine
from tinytitan.engine.backends.scripted import ScriptedBackend
from tinytitan.http.app import Server, ServerConfig
from tinytitan.memory.layer import MemoryEngine
from tinytitan.memory.scope import workspace_id
from tinytitan.memory.service import Memory, MemoryConfig
from tinytitan.memory.workspace import Workspace
from tinytitan.store.db import SqliteDatabase, db_path
from tinytitan.protocols.registry import all_protocols


MODEL = "tinytitan-scripted"
LAUNCH = "/src/launch-proj"
SYSTEM = "You are a coding agent.\nWorking directory: /src/the-repo\n"
FACT = "make -j2 (the default target rebuilds the docs and is slow)"
SET_CALL = ('<tool_call>\n{"name": "memory_set", "arguments": {"key": "build/command", "value": "%s", '
            '"importance": 4}}\n</tool_call>' % FACT)
GET_CALL = '<tool_call>\n{"name": "memory_get", "arguments": {"key": "build/command"}}\n</tool_call>'
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
PROTOCOLS = ["chat", "responses", "messages", "ollama"]


def config(tmp_path, **kw) -> MemoryConfig:
    kw.setdefault("consolidate", 0)  # consolidation has its own tests
    return MemoryConfig(directory=tmp_path / "memory", launch_dir=LAUNCH, user="tester", home="/home/tester", **kw)


def on_disk(directory, path: str = "/src/the-repo", user: str = "tester") -> Workspace:
    """A workspace's memory as the database holds it (opened apart from any server)."""
    return Workspace(SqliteDatabase(db_path(directory)), f"tinytitan/{user}/{workspace_id(path)}", path)


@asynccontextmanager
async def memory_server(demo_tok, script, memory_config: MemoryConfig):
    """A real server with memory on, stopped (and its database closed) at the end of the block."""
    memory = Memory(memory_config)
    engine = MemoryEngine(Engine(ScriptedBackend(entries(script), demo_tok, model_id=MODEL)), memory)
    server = Server(engine, all_protocols(), ServerConfig())
    hc = Config()
    hc.bind = ["127.0.0.1:0"]
    hc.accesslog = None
    hc.graceful_timeout = 0.5
    stop = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(functools.partial(hypercorn_serve, server.app, hc, shutdown_trigger=stop.wait))
            try:
                yield Running(binds[0].replace("0.0.0.0", "127.0.0.1"), server)
            finally:
                stop.set()
    finally:
        memory.close()


async def converse(s, protocol: str, stream: bool, tools=(), headers=None, system=SYSTEM) -> dict:
    """One turn through the protocol's official SDK: the text, the tool calls and the finish the client saw."""
    out = {"text": "", "calls": [], "finish": None, "output_tokens": None}
    if protocol == "chat":
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0,
                                      default_headers=headers) as c:
            kw = dict(model=MODEL, messages=[{"role": "system", "content": system},
                                             {"role": "user", "content": "How do I build this?"}])
            if tools:
                kw["tools"] = [{"type": "function", "function": t} for t in tools]
            if stream:
                calls: dict[int, dict] = {}
                async for chunk in await c.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                                   **kw):
                    if chunk.usage:
                        out["output_tokens"] = chunk.usage.completion_tokens
                        out["prompt_tokens"] = chunk.usage.prompt_tokens
                    for ch in chunk.choices:
                        out["text"] += ch.delta.content or ""
                        for tc in ch.delta.tool_calls or ():
                            slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                            slot["name"] += (tc.function.name or "") if tc.function else ""
                            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
                        out["finish"] = ch.finish_reason or out["finish"]
                out["calls"] = [calls[i] for i in sorted(calls)]
                assert sorted(calls) == list(range(len(calls)))  # the client's indexes have no holes
            else:
                r = await c.chat.completions.create(**kw)
                msg = r.choices[0].message
                out.update(text=msg.content or "", finish=r.choices[0].finish_reason,
                           output_tokens=r.usage.completion_tokens, prompt_tokens=r.usage.prompt_tokens,
                           calls=[{"name": t.function.name, "arguments": t.function.arguments}
                                  for t in msg.tool_calls or ()])
    elif protocol == "responses":
        async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0,
                                      default_headers=headers) as c:
            kw = dict(model=MODEL, instructions=system, input="How do I build this?", store=False)
            if tools:
                kw["tools"] = [{"type": "function", **t} for t in tools]
            if stream:
                final = None
                async for ev in await c.responses.create(stream=True, **kw):
                    if ev.type == "response.output_text.delta":
                        out["text"] += ev.delta
                    if ev.type in ("response.completed", "response.incomplete"):
                        final = ev.response
                r = final
                assert out["text"] == r.output_text
            else:
                r = await c.responses.create(**kw)
                out["text"] = r.output_text
            out["calls"] = [{"name": i.name, "arguments": i.arguments} for i in r.output if i.type == "function_call"]
            out["finish"] = "tool_calls" if out["calls"] else r.status
            out["output_tokens"] = r.usage.output_tokens
            out["items"] = [i.type for i in r.output]
    elif protocol == "ollama":
        c = ollama.AsyncClient(host=s.base, headers=headers)
        kw = dict(model=MODEL, messages=[{"role": "system", "content": system},
                                         {"role": "user", "content": "How do I build this?"}])
        if tools:
            kw["tools"] = [{"type": "function", "function": t} for t in tools]
        parts = [p async for p in await c.chat(stream=True, **kw)] if stream else [await c.chat(**kw)]
        out["text"] = "".join(p.message.content or "" for p in parts)
        out["calls"] = [{"name": t.function.name, "arguments": json.dumps(t.function.arguments)}
                        for p in parts for t in p.message.tool_calls or ()]
        out["finish"] = "tool_calls" if out["calls"] else parts[-1].done_reason
        out["output_tokens"] = parts[-1].eval_count
    else:
        async with anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0,
                                            default_headers=headers) as c:
            kw = dict(model=MODEL, max_tokens=1024, system=system,
                      messages=[{"role": "user", "content": "How do I build this?"}])
            if tools:
                kw["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                               for t in tools]
            m = await message(c, stream, **kw)
            out["text"] = "".join(b.text for b in m.content if b.type == "text")
            out["calls"] = [{"name": b.name, "arguments": json.dumps(b.input)} for b in m.content if b.type == "tool_use"]
            out["finish"] = m.stop_reason
            out["output_tokens"] = m.usage.output_tokens
    return out


ANSWER = "Build with make -j2; the default target is slow."
FACTS = f"build/command: {FACT}\n- `decisions/parser`: keep the hand-written parser\n../etc: not a key\n"


def the_repo(cfg) -> Workspace:
    return on_disk(cfg.directory)


async def wait_for_passes(s, n: int) -> None:
    with trio.fail_after(20):
        while s.engine.consolidator.passes < n:
            await trio.sleep(0.02)


def req(*system: str, header: str | None = None) -> ChatRequest:
    return ChatRequest(model="m", messages=tuple(Message("system", s) for s in system) + (Message("user", "hi"),),
                       workspace=header)

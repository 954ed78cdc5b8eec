#!/usr/bin/env python3
"""Does a long answer cost the same per token as a short one? In process, on the scripted backend (the engine's
own decode step, fold, channel parser and each protocol's machine; the model replaced by a script), over real
sockets: one answer of each size in each shape (plain text, a reasoning block, one long tool-call argument, a
JSON document under a schema) on each protocol, streamed and not. Prints the process's CPU time per token at each
size and the ratio of the largest size's to the smallest's: a flat cost reads about 1.0; work that grows with the
answer reads far above it. ``--stop``: with stop strings that never match. ``--naive-detokenizer``: a tokenizer
mlx-lm streams with its naive detokenizer (a ``*.tiktoken`` vocabulary's case). ``--turns``: instead, a
conversation of N turns (tool calls among them) answered in one token: the CPU time per turn of a request, after
the same conversation one turn shorter. ``--profile FILE``: cProfile of the event loop's thread in FILE, of the
model thread's jobs in FILE.model.

    python tools/bench_long_answers.py                      # 2k, 8k, 32k tokens: about 2 minutes on 2 cores
    python tools/bench_long_answers.py --naive-detokenizer --shapes tool --protocols chat
    python tools/bench_long_answers.py --turns 25,100,400 --protocols chat,anthropic,responses,ollama
    python tools/bench_long_answers.py --sizes 2000 --shapes tool --profile out.prof
"""

from __future__ import annotations

import argparse
import cProfile
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]  # (tests/naive_tokenizer.py)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import trio  # noqa: E402
from hypercorn.config import Config  # noqa: E402
from hypercorn.trio import serve as hypercorn_serve  # noqa: E402

from naive_tokenizer import naive_tokenizer  # noqa: E402
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry, demo_tokenizer  # noqa: E402
from tinytitan.engine.cache.memory import PromptCache  # noqa: E402
from tinytitan.engine.engine import Engine  # noqa: E402
from tinytitan.http.app import Server, ServerConfig  # noqa: E402
from tinytitan.protocols.registry import all_protocols  # noqa: E402

MODEL = "tinytitan-scripted"
WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "light", "north", "quiet", "table", "window", "garden",
         "\n", "ok,", "then."]
PARAMS = {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}


def body_text(tok, tokens: int, seed: int) -> str:
    """About ``tokens`` tokens of words (a different text per size, so nothing is shared)."""
    r = random.Random(seed)
    text = " ".join(r.choice(WORDS) for _ in range(tokens))
    ids = tok.encode(text, add_special_tokens=False)[:tokens]
    return tok.decode(ids).replace('"', "").replace("\\", "")


def raw_output(shape: str, text: str) -> str:
    if shape == "text":
        return text
    if shape == "reasoning":
        return "<think>\n" + text + "\n</think>\n\nDone."
    one_line = text.replace("\n", " ")
    if shape == "json":
        return '{"content":"' + one_line + '"}'
    return '<tool_call>\n{"name": "write", "arguments": {"content": "' + one_line + '"}}\n</tool_call>'


def request(protocol: str, shape: str, stream: bool, cap: int, stop: bool = False) -> tuple[str, dict]:
    path, b = _request(protocol, shape, stream, cap)
    if stop:  # stop strings that never match: what watching for them costs
        words = ["never seen here", "nor this", "<<end>>"]
        if protocol in ("chat", "completions"):
            b["stop"] = words
        elif protocol == "anthropic":
            b["stop_sequences"] = words
        elif protocol in ("ollama", "generate"):
            b["options"]["stop"] = words
    if shape == "json":  # structured output: the grammar's mask over the whole answer
        schema = {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"],
                  "additionalProperties": False}
        if protocol == "chat":
            b["response_format"] = {"type": "json_schema", "json_schema": {"name": "doc", "schema": schema}}
        elif protocol == "responses":
            b["text"] = {"format": {"type": "json_schema", "name": "doc", "schema": schema}}
        elif protocol == "anthropic":
            b["output_format"] = {"type": "json_schema", "schema": schema}
        elif protocol == "ollama":
            b["format"] = schema
    return path, b


def _request(protocol: str, shape: str, stream: bool, cap: int) -> tuple[str, dict]:
    tools = shape == "tool"
    msgs = [{"role": "user", "content": "write"}]
    if protocol == "chat":
        b = {"model": MODEL, "messages": msgs, "max_tokens": cap, "stream": stream}
        if tools:
            b["tools"] = [{"type": "function", "function": {"name": "write", "parameters": PARAMS}}]
        return "/v1/chat/completions", b
    if protocol == "completions":
        return "/v1/completions", {"model": MODEL, "prompt": "write", "max_tokens": cap, "stream": stream}
    if protocol == "responses":
        b = {"model": MODEL, "input": "write", "max_output_tokens": cap, "stream": stream, "store": False}
        if tools:
            b["tools"] = [{"type": "function", "name": "write", "parameters": PARAMS}]
        return "/v1/responses", b
    if protocol == "anthropic":
        cap = max(cap, 1025)  # (a thinking budget is 1024 tokens at least, and less than max_tokens)
        b = {"model": MODEL, "messages": msgs, "max_tokens": cap, "stream": stream}
        if shape == "reasoning":
            b["thinking"] = {"type": "enabled", "budget_tokens": cap - 1}
        if tools:
            b["tools"] = [{"name": "write", "input_schema": PARAMS}]
        return "/v1/messages", b
    if protocol == "ollama":
        b = {"model": MODEL, "messages": msgs, "stream": stream, "options": {"num_predict": cap}}
        if shape == "reasoning":
            b["think"] = True
        if tools:
            b["tools"] = [{"type": "function", "function": {"name": "write", "parameters": PARAMS}}]
        return "/api/chat", b
    if protocol == "generate":
        return "/api/generate", {"model": MODEL, "prompt": "write", "stream": stream, "options": {"num_predict": cap}}
    raise ValueError(protocol)


def transcript(protocol: str, turns: int, text: str) -> tuple[str, dict]:
    """A conversation of ``turns`` exchanges (every third a tool call and its result), then a new question;
    answered with one token."""
    args = '{"content": "' + text[:200] + '"}'
    if protocol in ("chat", "ollama"):
        msgs = [{"role": "system", "content": "Be brief."}]
        for t in range(turns):
            msgs.append({"role": "user", "content": f"turn {t}: {text[:300]}"})
            if t % 3 == 2:
                fn = {"name": "write", "arguments": args if protocol == "chat" else {"content": text[:200]}}
                call = {"id": f"call_{t}", "type": "function", "function": fn}
                msgs.append({"role": "assistant", "content": "", "tool_calls": [call]})
                msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": f"wrote {t}"}
                            if protocol == "chat" else {"role": "tool", "content": f"wrote {t}"})
            msgs.append({"role": "assistant", "content": f"answer {t}: {text[300:600]}"})
        msgs.append({"role": "user", "content": "and now?"})
        if protocol == "chat":
            return "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 1,
                                            "tools": [{"type": "function", "function": {"name": "write",
                                                                                         "parameters": PARAMS}}]}
        return "/api/chat", {"model": MODEL, "messages": msgs, "stream": False, "options": {"num_predict": 1},
                             "tools": [{"type": "function", "function": {"name": "write", "parameters": PARAMS}}]}
    if protocol == "anthropic":
        msgs = []
        for t in range(turns):
            user = [{"type": "text", "text": f"turn {t}: {text[:300]}"}]
            if t % 3 == 0 and t:
                user.insert(0, {"type": "tool_result", "tool_use_id": f"toolu_{t - 1}", "content": f"wrote {t}"})
            msgs.append({"role": "user", "content": user})
            answer = [{"type": "text", "text": f"answer {t}: {text[300:600]}"}]
            if t % 3 == 2 and t + 1 < turns:
                answer.append({"type": "tool_use", "id": f"toolu_{t}", "name": "write",
                               "input": {"content": text[:200]}})
            msgs.append({"role": "assistant", "content": answer})
        msgs.append({"role": "user", "content": "and now?"})
        return "/v1/messages", {"model": MODEL, "messages": msgs, "max_tokens": 1, "system": "Be brief.",
                                "tools": [{"name": "write", "input_schema": PARAMS}]}
    if protocol == "responses":
        items = []
        for t in range(turns):
            items.append({"role": "user", "content": f"turn {t}: {text[:300]}"})
            if t % 3 == 2:
                items.append({"type": "function_call", "call_id": f"call_{t}", "name": "write", "arguments": args})
                items.append({"type": "function_call_output", "call_id": f"call_{t}", "output": f"wrote {t}"})
            items.append({"role": "assistant", "content": f"answer {t}: {text[300:600]}"})
        items.append({"role": "user", "content": "and now?"})
        return "/v1/responses", {"model": MODEL, "input": items, "max_output_tokens": 16, "store": False,
                                 "instructions": "Be brief.",
                                 "tools": [{"type": "function", "name": "write", "parameters": PARAMS}]}
    raise ValueError(protocol)


async def one(client: httpx.AsyncClient, base: str, path: str, body: dict) -> tuple[float, int]:
    t0 = time.process_time()  # CPU, not wall: a shared machine's load does not move it
    n, tail = 0, b""
    async with client.stream("POST", base + path, json=body, headers={"anthropic-version": "2023-06-01"}) as r:
        async for chunk in r.aiter_raw():
            n += len(chunk)
            tail = (tail + chunk)[-4096:]
        # (a stream that failed after it opened says so at its end)
        if r.status_code != 200 or b'"error":{' in tail or b'"error": {' in tail:
            raise RuntimeError(f"{path}: {r.status_code} {tail[-300:]!r}")
    return time.process_time() - t0, n


async def transcripts(args, client, base, text, backend) -> None:
    """Per request, its CPU time ÷ the conversation's turns; each request after the same conversation one turn
    shorter (the prompt cache holding it), as an agent sends them."""
    counts = [int(n) for n in args.turns.split(",")]
    backend.entries = [ScriptEntry("ok")]
    for protocol in args.protocols.split(","):
        if protocol in ("completions", "generate"):
            continue
        per = []
        for n in counts:
            await one(client, base, *transcript(protocol, n - 1, text))
            best = min([(await one(client, base, *transcript(protocol, n, text))) for _ in range(args.reps)])
            per.append(best[0] / n * 1e6)
        print(f"{protocol:12} " + " ".join(f"{p:8.1f}" for p in per) + f"   ratio {per[-1] / per[0]:5.2f}", flush=True)
    print(f"\nµs per turn at {counts} turns; ratio = the most turns' ÷ the fewest's (flat ≈ 1.0)")


async def main(args) -> None:
    tok = naive_tokenizer(Path(tempfile.mkdtemp(prefix="naive-tok-"))) if args.naive_detokenizer else demo_tokenizer()
    backend = ScriptedBackend([ScriptEntry("")], tok, model_id=MODEL)
    server = Server(Engine(backend, max_queue=4), all_protocols(None), ServerConfig())
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    sizes = [int(s) for s in args.sizes.split(",")]
    texts = {n: body_text(tok, n, n) for n in sizes}
    rows = []
    if args.turns:
        backend.prompt_cache = PromptCache(2048 << 20)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(hypercorn_serve, server.app, config)
        base = binds[0].replace("0.0.0.0", "127.0.0.1")
        async with httpx.AsyncClient(timeout=600) as client:
            backend.entries = [ScriptEntry(texts[sizes[0]])]
            await one(client, base, *request("chat", "text", True, sizes[0] + 64))  # warm up
            if args.turns:
                await transcripts(args, client, base, texts[sizes[0]], backend)
                nursery.cancel_scope.cancel()
                return
            for protocol in args.protocols.split(","):
                for shape in args.shapes.split(","):
                    if protocol in ("completions", "generate") and shape != "text":
                        continue
                    for stream in (True, False):
                        per = []
                        for n in sizes:
                            output = raw_output(shape, texts[n])
                            tokens = len(tok.encode(output, add_special_tokens=False))
                            backend.entries = [ScriptEntry(output)]
                            path, b = request(protocol, shape, stream, tokens + 64, args.stop)
                            best = min([(await one(client, base, path, b)) for _ in range(args.reps)])
                            per.append(best[0] / tokens * 1e6)
                        rows.append((protocol, shape, "stream" if stream else "whole", per))
                        print(f"{protocol:12} {shape:9} {'stream' if stream else 'whole':6} "
                              + " ".join(f"{p:8.1f}" for p in per) + f"   ratio {per[-1] / per[0]:5.2f}", flush=True)
        nursery.cancel_scope.cancel()
    print(f"\nµs per token at {sizes}; ratio = the largest size's ÷ the smallest's (flat ≈ 1.0)")
    worst = max(rows, key=lambda r: r[3][-1] / r[3][0])
    print(f"worst: {worst[0]} {worst[1]} {worst[2]}: {worst[3][-1] / worst[3][0]:.2f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000,8000,32000", help="answer sizes in tokens (comma-separated)")
    p.add_argument("--protocols", default="chat,completions,responses,anthropic,ollama,generate")
    p.add_argument("--shapes", default="text,reasoning,tool,json")
    p.add_argument("--turns", metavar="N,N,…", help="instead: a conversation of N turns answered in one token, "
                   "per protocol (per-request work: validation, rendering, the prompt cache)")
    p.add_argument("--naive-detokenizer", action="store_true",
                   help="a tokenizer mlx-lm streams with its naive detokenizer (a *.tiktoken one's case)")
    p.add_argument("--stop", action="store_true", help="with stop strings (that never match) where the API has them")
    p.add_argument("--reps", type=int, default=1, help="requests per size (the fastest counts)")
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of the whole run to FILE")
    a = p.parse_args()
    if a.profile:  # the event loop's thread, and the model thread's jobs (the decode step) in a second file
        from tinytitan.engine.model_thread import ModelThread

        model_prof, start_soon = cProfile.Profile(), ModelThread.start_soon

        def profiled(self, fn, deliver):
            def run():
                model_prof.enable()
                try:
                    return fn()
                finally:
                    model_prof.disable()
            start_soon(self, run, deliver)

        ModelThread.start_soon = profiled
        cProfile.run("trio.run(main, a)", a.profile)
        model_prof.dump_stats(a.profile + ".model")
    else:
        trio.run(main, a)

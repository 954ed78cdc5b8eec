"""Recorded client traces (tests/traces/<client>/*.jsonl) replayed against an in-process server.

Each trace is what a real client sent (see tests/traces/README.md). Every recorded request is sent again
(method, path, query, the client's own headers, the body with ``model`` rewritten to the served id) to a
scripted server, and the reply must be one that client can read. This runs in CI without the clients.

Layout: shared helpers first, then one section per client, each parametrized over its own folder.
"""

from __future__ import annotations

import json

import httpx
import pytest

from responses_helpers import record_prompts
from sse import parse_sse
from trace_replay_helpers import DROP_HEADERS, TRACES, load_trace, replay

REPLY = "Hello from the replay."


def trace_params(client: str) -> list:
    """One pytest param per trace file under tests/traces/<client>, id ``<client>/<stem>``."""
    paths = sorted((TRACES / client).glob("*.jsonl"))
    assert paths, f"no traces under {TRACES / client}"
    return [pytest.param(p, id=f"{client}/{p.stem}") for p in paths]


def check_responses_stream(resp: httpx.Response, model: str) -> dict:
    """A well-formed OpenAI Responses event stream; → the terminal event's ``response`` object."""
    assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
    assert "[DONE]" not in resp.text, "Responses streams have no [DONE] terminal"
    return check_responses_events(parse_sse(resp.text), model)


def check_responses_events(events: list[tuple[str | None, object]], model: str) -> dict:
    """The events of a well-formed Responses stream; → the terminal event's ``response`` object."""
    assert events, "empty stream"
    for name, data in events:
        assert isinstance(data, dict), (name, data)
        assert name == data["type"], f"event: {name} carries type {data['type']}"
    types = [d["type"] for _, d in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert [d["sequence_number"] for _, d in events] == list(range(len(events))), "sequence_number not 0,1,2…"

    terminal = {"response.completed", "response.incomplete", "response.failed"}
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert not terminal & set(types[:-1]), types
    final = events[-1][1]["response"]
    assert final["object"] == "response" and final["id"].startswith("resp_")
    assert final["status"] == types[-1].removeprefix("response.")
    assert final["model"] == model
    for _, d in events:
        if "response" in d:
            assert d["response"]["id"] == final["id"], d["type"]
    usage = final["usage"]
    assert usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]

    added, done = {}, {}
    for i, (_, d) in enumerate(events):
        if d["type"] == "response.output_item.added":
            assert d["output_index"] not in added, f"output_index {d['output_index']} added twice"
            added[d["output_index"]] = (i, d["item"])
        elif d["type"] == "response.output_item.done":
            assert d["output_index"] in added and d["output_index"] not in done, d
            assert added[d["output_index"]][0] < i
            assert added[d["output_index"]][1]["id"] == d["item"]["id"]
            done[d["output_index"]] = d["item"]
    assert set(done) == set(added) == set(range(len(added))), (sorted(added), sorted(done))
    assert final["output"] == [done[k] for k in sorted(done)]
    return final


def output_text(response: dict) -> str:
    return "".join(c["text"] for item in response["output"] if item["type"] == "message"
                   for c in item["content"] if c["type"] == "output_text")


# --- Claude Code (tests/traces/claude) ---------------------------------------------------------
# HEAD / (Claude Code's reachability probe), POST /v1/messages?beta=true (always streaming) and
# POST /v1/messages/count_tokens?beta=true (``/context``).

STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
DELTA_TYPES = {"text": ("text_delta",), "thinking": ("thinking_delta", "signature_delta"),
               "redacted_thinking": (), "tool_use": ("input_json_delta",)}


def check_messages_stream(events: list[tuple[str | None, object]], model: str) -> list[dict]:
    """A well-formed Anthropic Messages event stream; → its content blocks, each with ``_deltas`` (the
    concatenated text / thinking / partial JSON)."""
    events = [(n, d) for n, d in events if not (n is None and d == "")]  # ":" comment lines (keep-alives)
    assert events, "empty stream"
    for name, data in events:
        assert isinstance(data, dict), (name, data)
        assert data.get("type") == name, (name, data)  # the SSE event name is the payload's type
        assert name != "error", data
    names = [n for n, _ in events if n != "ping"]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    assert names.count("message_start") == names.count("message_delta") == names.count("message_stop") == 1, names
    assert names[-2] == "message_delta", names  # after every block closed, right before message_stop
    start = events[0][1]["message"]
    assert start["type"] == "message" and start["role"] == "assistant" and start["id"], start
    assert start["model"] == model and start["content"] == [], start

    blocks: list[dict] = []
    open_index = None
    delta = None
    for name, data in events[1:]:
        if name == "content_block_start":
            assert open_index is None, f"block {data['index']} opened while {open_index} is open"
            assert data["index"] == len(blocks), (data["index"], len(blocks))  # 0, 1, 2 ... in order
            open_index = data["index"]
            blocks.append({**data["content_block"], "_deltas": ""})
        elif name == "content_block_delta":
            assert data["index"] == open_index, (data, open_index)
            d = data["delta"]
            assert d["type"] in DELTA_TYPES.get(blocks[-1]["type"], ()), (blocks[-1]["type"], data)
            blocks[-1]["_deltas"] += d.get("text") or d.get("thinking") or d.get("partial_json") or ""
        elif name == "content_block_stop":
            assert data["index"] == open_index, (data, open_index)
            open_index = None
        elif name == "message_delta":
            assert open_index is None, f"message_delta while block {open_index} is open"
            delta = data
    assert delta["delta"]["stop_reason"] in STOP_REASONS, delta
    assert isinstance(delta["usage"]["output_tokens"], int), delta
    for b in blocks:
        if b["type"] == "tool_use":
            assert isinstance(json.loads(b["_deltas"] or "{}"), dict), b
    return blocks


def check_claude_reply(record: dict, resp: httpx.Response, model: str) -> None:
    method, path = record["method"], record["path"]
    if method == "HEAD":
        assert path == "/" and resp.status_code == 200
    elif path == "/v1/messages/count_tokens":
        assert resp.headers["content-type"].startswith("application/json"), resp.headers
        out = resp.json()
        assert isinstance(out.get("input_tokens"), int) and out["input_tokens"] > 0, out
    elif path == "/v1/messages" and record["body"].get("stream") is True:
        assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
        blocks = check_messages_stream(parse_sse(resp.text), model)
        assert [b["_deltas"] for b in blocks if b["type"] == "text"] == [REPLY], blocks
    elif path == "/v1/messages":
        out = resp.json()
        assert out["type"] == "message" and out["role"] == "assistant" and out["model"] == model, out
        assert [b["text"] for b in out["content"] if b["type"] == "text"] == [REPLY], out
        assert out["stop_reason"] in STOP_REASONS, out
    else:
        raise AssertionError(f"no check for {method} {path}")


@pytest.mark.parametrize("trace", trace_params("claude"))
async def test_claude_trace_replays(serve, trace):
    s = await serve([REPLY])
    model = s.engine.backend.model_id
    records = load_trace(trace)
    async with httpx.AsyncClient(timeout=60) as h:
        for record in records:
            where = f"{trace.name} #{record['seq']} {record['method']} {record['path']}"
            resp = await replay(h, s, record, model)
            if "safeguards" in (record["body"] or {}):  # interactive auto mode, once per session: refused by name
                assert resp.status_code == 400 and "'safeguards'" in resp.json()["error"]["message"], resp.text
                continue
            assert 200 <= resp.status_code < 300, f"{where}: {resp.status_code} {resp.text[:2000]}"
            try:
                check_claude_reply(record, resp, model)
            except AssertionError as e:
                raise AssertionError(f"{where}: {e}") from e


def test_messages_stream_check_rejects_broken_streams():
    """The Claude stream check is not vacuous: each rule catches a stream that breaks it."""
    def ev(kind, **kw):
        return (kind, {"type": kind, **kw})
    start = ev("message_start", message={"id": "m", "type": "message", "role": "assistant", "model": "m",
                                         "content": []})
    block = [ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
             ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "hi"}),
             ev("content_block_stop", index=0)]
    end = [ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1}), ev("message_stop")]
    assert [b["_deltas"] for b in check_messages_stream([start, *block, *end], "m")] == ["hi"]
    broken = [
        [*block, start, *end],  # message_start not first
        [start, *block, end[0]],  # no message_stop
        [start, *block[:2], *end],  # a block never closed
        [start, *block, *block, *end],  # the second block reuses index 0
        [start, block[0], ev("content_block_delta", index=1, delta={"type": "text_delta", "text": "x"}),
         block[2], *end],  # a delta for a block that is not open
        [start, end[0], *block, end[1]],  # message_delta before the blocks
        [start, *block, ev("error", error={"type": "api_error", "message": "x"}), *end],
        [start, *block, ev("message_delta", delta={"stop_reason": "bogus"}, usage={"output_tokens": 1}), end[1]],
    ]
    for events in broken:
        with pytest.raises(AssertionError):
            check_messages_stream(events, "m")


# --- Codex CLI (tests/traces/codex) -------------------------------------------------------------


@pytest.mark.parametrize("trace", trace_params("codex"))
async def test_codex_trace_replays(serve, trace):
    s = await serve([REPLY])
    model = s.engine.backend.model_id
    prompts = record_prompts(s)
    records = load_trace(trace)
    async with httpx.AsyncClient(timeout=30) as h:
        for record in records:
            where = f"{trace.name} #{record['seq']} {record['method']} {record['path']}"
            # Codex speaks only the Responses API, streaming, statelessly
            assert (record["method"], record["path"]) == ("POST", "/v1/responses"), where
            assert record["body"]["stream"] is True and record["body"]["store"] is False, where
            resp = await replay(h, s, record, model)
            assert 200 <= resp.status_code < 300, f"{where}: {resp.status_code} {resp.text[:2000]}"
            final = check_responses_stream(resp, model)
            assert final["status"] == "completed", where
            assert output_text(final) == REPLY, where
            check_codex_prompt(record["body"], prompts[-1], where)


def test_responses_stream_check_rejects_broken_streams():
    """The Responses stream check is not vacuous: each rule catches a stream that breaks it."""
    item = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
    usage = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}

    def resp(status, output):
        return {"id": "resp_1", "object": "response", "status": status, "model": "m", "output": output,
                "usage": usage if status != "in_progress" else None}

    def stream(*kinds):
        out = []
        for kind, data in kinds:
            out.append((kind, {"type": kind, "sequence_number": len(out), **data}))
        return out

    created = ("response.created", {"response": resp("in_progress", [])})
    progress = ("response.in_progress", {"response": resp("in_progress", [])})
    added = ("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}})
    delta = ("response.output_text.delta", {"output_index": 0, "content_index": 0, "item_id": "msg_1", "delta": "hi"})
    done = ("response.output_item.done", {"output_index": 0, "item": item})
    completed = ("response.completed", {"response": resp("completed", [item])})
    assert check_responses_events(stream(created, progress, added, delta, done, completed), "m")["output"] == [item]
    good = stream(created, progress, added, delta, done, completed)
    broken = [
        stream(progress, created, added, delta, done, completed),  # created not first
        stream(created, added, delta, done, completed),  # no in_progress
        stream(created, progress, added, delta, completed),  # an item added, never done
        stream(created, progress, delta, done, completed),  # an item done, never added
        stream(created, progress, added, delta, done),  # no terminal event
        stream(created, progress, added, delta, done, completed, delta),  # events after the terminal one
        stream(created, progress, added, delta, done, ("response.failed", {"response": resp("failed", [item])})),
        stream(created, progress, added, delta, done, ("response.completed", {"response": resp("completed", [])})),
        stream(created, progress, added, delta, done, ("response.completed", {"response": resp("incomplete", [item])})),
        [*good[:3], (good[3][0], {**good[3][1], "sequence_number": 7}), *good[4:]],  # sequence gap
        [(None, {**d, "type": "response.x"}) if i == 3 else (n, d) for i, (n, d) in enumerate(good)],  # name ≠ type
        [*good, (None, "[DONE]")],
    ]
    for events in broken:
        with pytest.raises(AssertionError):
            check_responses_events(events, "m")


def check_codex_prompt(body: dict, prepared, where: str) -> None:
    """What Codex sent reached the model: its function tools (namespaces flattened), the user's words,
    each tool call it sends back and that call's output."""
    names = {t["name"] for t in body["tools"] if t["type"] == "function"}
    names |= {f"{t['name']}__{f['name']}" for t in body["tools"] if t["type"] == "namespace" for f in t["tools"]}
    assert "exec_command" in names and names <= set(prepared.tool_schemas), (where, sorted(names))
    text = prepared.prompt_text
    for item in body["input"]:
        if item["type"] == "message" and item["role"] == "user":
            for part in item["content"]:
                assert part["text"].strip() in text, (where, part["text"][:200])
        elif item["type"] == "function_call":
            name = f'{item["namespace"].rstrip("_")}__{item["name"]}' if item.get("namespace") else item["name"]
            assert f'"name": "{name}"' in text, where
            if item["name"] == "exec_command":
                assert json.loads(item["arguments"])["cmd"] in text, where
        elif item["type"] == "function_call_output":  # a string, or text parts (an MCP tool's result)
            output = item["output"]
            for piece in [output] if isinstance(output, str) else [p["text"] for p in output]:
                assert piece.strip() in text, where
        elif item["type"] == "tool_search_output":  # the loaded tools are declared where the output stands
            for tool in item["tools"]:
                for fn in tool.get("tools", [tool]):
                    assert fn["description"] in text.split("<tool_response>", 1)[-1], where


# --- Codex CLI over a WebSocket (tests/traces/codex_websocket, tools/record_socket.py's format) ---------------


def socket_trace_params() -> list:
    paths = sorted((TRACES / "codex_websocket").glob("*.jsonl"))
    assert paths, "no WebSocket traces"
    return [pytest.param(p, id=f"codex_websocket/{p.stem}") for p in paths]


def _without_deltas(events: list[dict]) -> list[tuple]:
    return [(e["type"], e.get("output_index"), (e.get("item") or {}).get("type")) for e in events
            if e["type"] != "response.output_text.delta"]


@pytest.mark.parametrize("trace", socket_trace_params())
async def test_codex_websocket_trace_replays(serve, trace):
    """Every recorded client frame is sent again on one socket, ``model`` rewritten and each
    ``previous_response_id`` mapped to the replayed response of the same turn, and each call id to the replayed
    call's (the client answers the calls it was sent); each turn must answer the events the recording got, in
    order and numbering (the script makes the same outputs), each strictly valid."""
    import strict
    from httpx_ws import aconnect_ws

    records = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    (upgrade,) = [r for r in records if r["event"] == "upgrade"]
    assert "responses_websockets=" in upgrade["headers"]["openai-beta"]
    # the script: what the model said in each generating turn (a call, then text), read back from the recording
    s = await serve(["<tool_call>\n" + json.dumps({"name": "exec_command", "arguments": {"cmd": "true"}})
                     + "\n</tool_call>", REPLY])
    model = s.engine.backend.model_id
    headers = {k: v for k, v in upgrade["headers"].items()
               if k not in DROP_HEADERS and not k.startswith("sec-websocket") and k != "upgrade"}
    turns: list[tuple[dict, list[dict]]] = []
    for r in records:
        if r["event"] == "client":
            turns.append((r["frame"], []))
        elif r["event"] == "server":
            turns[-1][1].append(r["frame"])
    ids: dict[str, str] = {}
    calls: list[str] = []  # the replayed calls' ids, not yet answered
    async with httpx.AsyncClient(timeout=30) as h:
        async with aconnect_ws(s.url(upgrade["path"]), h, headers=headers) as ws:
            for frame, recorded in turns:
                sent = {**frame, "model": model}
                if sent.get("previous_response_id"):
                    sent["previous_response_id"] = ids[sent["previous_response_id"]]
                for i in sent.get("input") if isinstance(sent.get("input"), list) else ():
                    if "call_id" in i and i["call_id"] not in ids and calls:  # the next call replayed, in order
                        ids[i["call_id"]] = calls.pop(0)
                sent["input"] = [{**i, "call_id": ids.get(i["call_id"], i["call_id"])} if "call_id" in i else i
                                 for i in sent["input"]] if isinstance(sent.get("input"), list) else sent.get("input")
                await ws.send_text(json.dumps(sent))
                if frame["type"] != "response.create":
                    continue
                got = []
                while not got or got[-1]["type"] not in ("response.completed", "response.failed", "error"):
                    got.append(json.loads(await ws.receive_text()))
                for event in got:
                    strict.response_event(event)
                assert [e["sequence_number"] for e in got] == list(range(len(got)))
                # (text arrives in as many deltas as the tokenizer makes: the rest is event for event)
                assert _without_deltas(got) == _without_deltas(recorded), (got, recorded)
                ids[recorded[-1]["response"]["id"]] = got[-1]["response"]["id"]
                calls += [e["item"]["call_id"] for e in got if e["type"] == "response.output_item.done"
                          and "call_id" in e["item"]]  # (the recording keeps only the events' types)
    assert ids, "the trace holds no response"

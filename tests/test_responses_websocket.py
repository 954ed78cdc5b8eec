"""Responses over a WebSocket (``GET /v1/responses`` with ``Upgrade: websocket``), as Codex's built-in provider
and OpenAI's WebSocket mode use it: every server frame is one Responses stream event (validated strictly
against the SDK's ``ResponseStreamEvent``), exactly the SSE stream's events in order and numbering; refusals
in band; ``previous_response_id`` against the connection's own responses even with ``store: false``; a prewarm;
a hang-up stops the generation; pings, idle timeout, the body limit per frame and binary frames."""

from __future__ import annotations

import json
import logging
import sqlite3

import httpx
import pytest
import trio
from httpx_ws import WebSocketDisconnect, aconnect_ws

import strict
from backends import Recording
from sse import parse_sse
from tinytitan.engine.backends.scripted import ScriptEntry, ScriptedBackend
from websocket_helpers import MODEL, create, error_of, turn, upgrade_headers

CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]
LONG = "word " * 800


def shape(events: list[dict]) -> list[tuple]:
    """An event list without what differs between two runs of the same script (ids, timestamps)."""
    return [(e["type"], e["sequence_number"], e.get("output_index"), e.get("delta"), e.get("item", {}).get("type"))
            for e in events]


async def test_frames_are_the_sse_streams_events(serve):
    """The same script over HTTP and over the socket: the same events, order and sequence numbers."""
    script = ["<think>Let me see.</think>Hello there.", CALL]
    http_server = await serve(script)
    socket_server = await serve(script)
    async with httpx.AsyncClient() as client:
        sse = []
        for body in ({"input": "hi"}, {"input": "hi", "tools": TOOLS}):
            r = await client.post(http_server.url("/v1/responses"),
                                  json={"model": MODEL, "store": False, "stream": True, **body})
            sse.append([data for _, data in parse_sse(r.text)])
        async with aconnect_ws(socket_server.url("/v1/responses"), client) as ws:
            assert ws.response.headers["openai-version"] == "2020-10-01"
            assert ws.response.headers["x-request-id"].startswith("req_")
            await ws.send_text(create(input="hi"))
            frames = [await turn(ws)]
            await ws.send_text(create(input="hi", tools=TOOLS))
            frames.append(await turn(ws))
    for over_http, over_socket in zip(sse, frames):
        assert shape(over_socket) == shape(over_http)
    assert [e["item"]["type"] for e in frames[1] if e["type"] == "response.output_item.done"] == ["function_call"]
    assert frames[0][-1]["response"]["output"][0]["type"] == "reasoning"


async def test_previous_response_id_chains_on_the_connection_even_unstored(serve, demo_tok):
    """A tool round trip as Codex makes it: store false, the second turn sends only the call's output."""
    backend = Recording([ScriptEntry(CALL), ScriptEntry("Done.")], demo_tok)
    server = await serve(backend=backend)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="run f", tools=TOOLS))
            first = await turn(ws)
            response = first[-1]["response"]
            assert first[-1]["type"] == "response.completed" and response["store"] is False
            (call,) = [i for i in response["output"] if i["type"] == "function_call"]
            await ws.send_text(json.dumps({"type": "response.processed", "response_id": response["id"]}))
            await ws.send_text(create(input=[{"type": "function_call_output", "call_id": call["call_id"],
                                              "output": "f says 42"}],
                                      tools=TOOLS, previous_response_id=response["id"]))
            second = await turn(ws)
            assert second[-1]["type"] == "response.completed"
            assert second[-1]["response"]["previous_response_id"] == response["id"]
            assert second[-1]["response"]["output"][0]["content"][0]["text"] == "Done."
        # nothing was stored: over HTTP the id is unknown
        r = await client.get(server.url(f"/v1/responses/{response['id']}"))
        assert r.status_code == 404
    # the second prompt held the whole conversation: the question, the call and its output
    assert "run f" in backend.prompts[1] and "f says 42" in backend.prompts[1] and '"a": 1' in backend.prompts[1]


async def test_the_cache_is_the_connections_own(serve):
    server = await serve(["one", "two"])
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi"))
            rid = (await turn(ws))[-1]["response"]["id"]
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="more", previous_response_id=rid))
            err = error_of(await turn(ws), 400)  # the API's previous_response_not_found: a client resends whole
            assert err["param"] == "previous_response_id" and rid in err["message"]
            assert err["code"] == "previous_response_not_found"


async def test_a_stored_response_chains_across_connections(serve):
    server = await serve(["one", "two"])
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/responses"), json={"model": MODEL, "input": "hi"})
        rid = r.json()["id"]
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="more", previous_response_id=rid))
            frames = await turn(ws)
            assert frames[-1]["type"] == "response.completed"


async def test_a_prewarm_decodes_nothing_and_is_chained_from(serve, demo_tok):
    backend = Recording([ScriptEntry("answer")], demo_tok)
    server = await serve(backend=backend)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="the long shared prefix", instructions="be brief", generate=False))
            frames = await turn(ws)
            assert [f["type"] for f in frames] == ["response.created", "response.in_progress", "response.completed"]
            assert frames[-1]["response"]["output"] == [] and backend.prompts == []
            await ws.send_text(create(input="the question", previous_response_id=frames[-1]["response"]["id"]))
            frames = await turn(ws)
            assert frames[-1]["response"]["output"][0]["content"][0]["text"] == "answer"
    assert len(backend.prompts) == 1
    assert "the long shared prefix" in backend.prompts[0] and "the question" in backend.prompts[0]


async def test_refusals_are_in_band_and_the_socket_stays_open(serve, caplog):
    server = await serve(["ok"], max_body_bytes=4096)
    async with httpx.AsyncClient() as client:
        r = await client.post(server.url("/v1/responses"), json={"model": MODEL, "input": "hi", "background": True})
        over_http = r.json()["error"]
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi", background=True))
            assert error_of(await turn(ws), 400) == over_http  # the same refusal, by name
            await ws.send_text(create(input="hi", model="nope"))
            assert error_of(await turn(ws), 404)["code"] == "model_not_found"
            await ws.send_text("{not json")
            assert error_of(await turn(ws), 400)["code"] == "invalid_json"
            await ws.send_text(json.dumps({"type": "response.append", "input": []}))
            assert "Unknown frame type 'response.append'" in error_of(await turn(ws), 400)["message"]
            await ws.send_text(json.dumps([1]))
            assert error_of(await turn(ws), 400)["param"] == "type"
            await ws.send_text(create(input="hi", generate="no"))
            assert error_of(await turn(ws), 400)["param"] == "generate"
            await ws.send_text(json.dumps({"type": "response.processed"}))
            assert error_of(await turn(ws), 400)["param"] == "response_id"
            await ws.send_bytes(create(input="hi").encode())
            assert error_of(await turn(ws), 400)["code"] == "binary_frame"
            await ws.send_text(create(input="x" * 5000))  # the body limit, per frame
            assert "larger than 4096 bytes" in error_of(await turn(ws), 413)["message"]
            await ws.send_text(create(input="hi"))
            assert (await turn(ws))[-1]["type"] == "response.completed"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_a_full_queue_is_an_in_band_429(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=20), ScriptEntry("ok")], demo_tok)
    server = await serve(backend=backend, max_queue=0)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as busy, \
                aconnect_ws(server.url("/v1/responses"), client) as ws:
            await busy.send_text(create(input="long"))
            with trio.fail_after(20):
                while server.engine.running == 0:
                    await trio.sleep(0.01)
            await ws.send_text(create(input="hi"))
            assert error_of(await turn(ws), 429)["code"] == "queue_full"


async def test_a_hang_up_mid_response_stops_it_and_frees_its_place(serve, demo_tok):
    backend = ScriptedBackend([ScriptEntry(LONG, delay_ms=30), ScriptEntry("after")], demo_tok)
    server = await serve(backend=backend)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="long"))
            deltas = 0
            while deltas < 3:
                deltas += json.loads(await ws.receive_text())["type"] == "response.output_text.delta"
        with trio.fail_after(20):
            while server.engine.running or server.engine.waiting:
                await trio.sleep(0.02)
        stopped_at = backend.tokens_decoded
        await trio.sleep(0.3)
        assert backend.tokens_decoded == stopped_at < 20
        r = await client.post(server.url("/v1/responses"), json={"model": MODEL, "input": "hi"})
        assert r.json()["output"][0]["content"][0]["text"] == "after"


async def test_pings_are_answered_and_a_quiet_socket_is_closed(serve, monkeypatch, caplog):
    """A quiet socket is closed normally (1000), with nothing logged as an error."""
    server = await serve(["ok"])
    monkeypatch.setitem(server.server.protocols["openai_responses"].spec.extra["websocket"], "idle_seconds", 0.5)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            with trio.fail_after(5):
                await (await ws.ping(b"hello")).wait()
            with trio.fail_after(5), pytest.raises(WebSocketDisconnect) as closed:
                await ws.receive_text()
    assert closed.value.code == 1000, closed.value
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_each_exchange_is_logged(serve, caplog):
    server = await serve(["ok"])
    caplog.set_level(logging.INFO, "tinytitan.requests")
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi"))
            await turn(ws)
            await ws.send_text(create(input="hi", model="nope"))
            await turn(ws)
    with trio.fail_after(20):  # (the upgrade's record is made once the socket is closed)
        while not any(r.getMessage().startswith("GET /v1/responses 101") for r in caplog.records):
            await trio.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"]
    assert any(line.startswith(f"WS /v1/responses 200 openai_responses model={MODEL}") for line in lines), lines
    assert any(line.startswith("WS /v1/responses 404 openai_responses") for line in lines), lines
    assert any(line.startswith("GET /v1/responses 101 openai_responses") for line in lines), lines


async def test_with_the_socket_switched_off_an_upgrade_is_426(serve):
    server = await serve(["ok"], websocket=False)
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url("/v1/responses"), headers=upgrade_headers())
        assert r.status_code == 426 and r.json()["error"]["code"] == "upgrade_required"
        r = await client.post(server.url("/v1/responses"), json={"model": MODEL, "input": "hi"})
        assert r.status_code == 200


async def test_a_plain_get_on_the_socket_path_is_405(serve):
    server = await serve(["ok"])
    async with httpx.AsyncClient() as client:
        r = await client.get(server.url("/v1/responses"))
    assert r.status_code == 405 and "WebSocket" in r.json()["error"]["message"]


async def test_an_unexpected_failure_is_a_500_frame_and_the_socket_goes_on(serve, monkeypatch, caplog):
    server = await serve(["ok"])
    proto = server.server.protocols["openai_responses"]
    real = proto.generate
    calls = []

    async def broken(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return await real(*args, **kwargs)

    monkeypatch.setattr(proto, "generate", broken)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="hi"))
            assert error_of(await turn(ws), 500)["type"] == "server_error"
            await ws.send_text(create(input="hi"))
            assert (await turn(ws))[-1]["type"] == "response.completed"
    assert "WebSocket exchange failed" in caplog.text


async def test_a_long_chain_outlives_the_cache_of_its_ancestors(serve, monkeypatch, demo_tok):
    """Codex chains every turn from the one before: the connection keeps each response with its whole
    conversation, so the chain holds however many turns the cache has dropped."""
    backend = Recording([ScriptEntry(f"answer {i}") for i in range(6)], demo_tok)
    server = await serve(backend=backend)
    monkeypatch.setitem(server.server.protocols["openai_responses"].spec.extra["websocket"], "keep_responses", 2)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            previous = None
            for i in range(6):
                await ws.send_text(create(input=f"question {i}", **({"previous_response_id": previous} if previous else {})))
                frames = await turn(ws)
                assert frames[-1]["type"] == "response.completed", frames[-1]
                previous = frames[-1]["response"]["id"]
    assert all(f"question {i}" in backend.prompts[-1] and (i == 5 or f"answer {i}" in backend.prompts[-1])
               for i in range(6)), backend.prompts[-1]


async def test_a_compaction_trigger_over_the_socket_chains_from_the_connection(serve):
    """Codex's built-in provider compacts with a compaction_trigger item (remote_compaction_v2): over the socket
    too, chained to the connection's last response, it gets exactly one compaction item in the same events."""
    server = await serve(["Looking at it.", "Summary: fix src/app.py."])
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="Fix the bug in src/app.py please."))
            rid = (await turn(ws))[-1]["response"]["id"]
            await ws.send_text(create(input=[{"type": "compaction_trigger"}], previous_response_id=rid))
            frames = await turn(ws)
    assert [f["type"] for f in frames] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    (item,) = frames[-1]["response"]["output"]
    assert item["type"] == "compaction" and item["encrypted_content"]


async def test_connections_over_the_cap_are_refused_with_426(serve):
    """Past ``max_websockets`` open sockets an upgrade is refused before it is accepted: 426, which sends Codex
    to plain HTTP at once, with a message saying why; a socket closed frees its place."""
    from httpx_ws import WebSocketUpgradeError

    s = await serve(["Hi."], max_websockets=2)
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(s.url("/v1/responses"), client) as first, \
                aconnect_ws(s.url("/v1/responses"), client) as second:
            with pytest.raises(WebSocketUpgradeError) as refused:
                async with aconnect_ws(s.url("/v1/responses"), client):
                    pass
            assert refused.value.response.status_code == 426
            r = await client.get(s.url("/v1/responses"), headers=upgrade_headers())  # (its body, read whole)
            assert r.status_code == 426 and r.headers["connection"] == "close"
            error = strict.openai_error(r.json())
            assert error.code == "websocket_connection_limit_reached" and "--max-websockets" in error.message
            for ws in (first, second):  # the open ones go on
                await ws.send_text(create(input="hi"))
                assert (await turn(ws))[-1]["type"] == "response.completed"
            # plain HTTP is unaffected by the cap
            r = await client.post(s.url("/v1/responses"), json={"model": MODEL, "input": "hi", "store": False})
            assert r.status_code == 200
        with trio.fail_after(10):  # the closed ones' places come back (the server notices the close)
            while True:
                try:
                    async with aconnect_ws(s.url("/v1/responses"), client) as again, \
                            aconnect_ws(s.url("/v1/responses"), client) as another:
                        await again.send_text(create(input="hi"))
                        assert (await turn(again))[-1]["type"] == "response.completed"
                        await another.send_text(create(input="hi"))
                        assert (await turn(another))[-1]["type"] == "response.completed"
                    break
                except WebSocketUpgradeError:
                    await trio.sleep(0.05)


async def test_a_stored_turn_chained_from_an_unstored_one_chains_after_the_connection(serve):
    """store: true on a turn chained from one only the connection holds (store: false): stored with the whole
    conversation, so another socket or plain HTTP can chain from it."""
    server = await serve(["one", "two", "three"])
    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="first question"))
            first = (await turn(ws))[-1]["response"]["id"]
            await ws.send_text(create(input="second question", store=True, previous_response_id=first))
            second = (await turn(ws))[-1]["response"]["id"]
        r = await client.post(server.url("/v1/responses"), json={"model": MODEL, "input": "third",
                                                                  "previous_response_id": second})
        assert r.status_code == 200, r.text
        assert r.json()["output"][0]["content"][0]["text"] == "three"


async def test_a_store_that_cannot_be_read_loses_the_record_not_the_answer(serve, monkeypatch):
    """Storing a turn chained from one only the connection holds first asks the store whether that one is stored;
    a store that cannot be read then (a lost database server) loses this record, as a failed write does, and the
    turn still ends with its response.completed, not an error frame in its place."""
    server = await serve(["one", "two"])
    db = server.server.protocols["openai_responses"].store().db
    real = db.run

    def run(fn, *args, write=True):
        if not write:
            raise sqlite3.OperationalError("disk I/O error")
        return real(fn, *args, write=write)

    async with httpx.AsyncClient() as client:
        async with aconnect_ws(server.url("/v1/responses"), client) as ws:
            await ws.send_text(create(input="first question"))
            first = (await turn(ws))[-1]["response"]["id"]
            monkeypatch.setattr(db, "run", run)
            await ws.send_text(create(input="second question", store=True, previous_response_id=first))
            frames = await turn(ws)
    assert frames[-1]["type"] == "response.completed", frames[-1]
    assert frames[-1]["response"]["output"][0]["content"][0]["text"] == "two"

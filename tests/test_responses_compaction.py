"""Compaction: POST /v1/responses/compact (model required; first pass, second pass, guards, fallback),
the compaction item read back into the system prompt, and Codex's compaction_trigger on /v1/responses."""

from __future__ import annotations

import base64
import json

import openai
import pytest

from tinytitan.engine import summarise
from tinytitan.protocols import compaction

from responses_helpers import MODEL, client, post, record_prompts, sse_events
from compaction_helpers import HISTORY, SHORT, payload

LONG = " ".join(f"Fact {i}: the file src/app.py line {i} was read." for i in range(40))


async def compact(s, **body):
    return await post(s, "/v1/responses/compact", {"model": MODEL, "input": HISTORY, **body})


async def test_model_required(serve):
    s = await serve(["x"])
    resp = await post(s, "/v1/responses/compact", {"input": HISTORY})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "model"
    resp = await post(s, "/v1/responses/compact", {"model": MODEL, "input": HISTORY, "bogus": 1})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "bogus"
    resp = await post(s, "/v1/responses/compact", {"model": "other", "input": HISTORY})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    resp = await post(s, "/v1/responses/compact", {"model": MODEL})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "input"


async def test_first_pass_fits(serve):
    s = await serve([SHORT])
    prompts = record_prompts(s)
    resp = await compact(s, instructions="You are a coding agent.")
    assert resp.status_code == 200
    out = resp.json()
    assert out["object"] == "response.compaction"
    assert out["output"][0]["type"] == "message" and out["output"][0]["content"][0]["text"] == "You are a coding agent."
    assert [o["type"] for o in out["output"]] == ["message", "compaction"]
    p = payload(out["output"][1])
    assert p["v"] == 1 and p["model"] == MODEL and p["mode"] == "model" and p["summary"] == SHORT and p["createdAt"]
    assert out["usage"]["input_tokens"] == len(prompts[0].tokens)
    req = prompts[0].req
    assert req.temperature == 0 and prompts[0].prompt_text.endswith("<think>\n\n</think>\n\n")  # thinking off
    assert "handover" in req.messages[0].content and "exactly" in req.messages[0].content
    transcript = req.messages[1].content
    assert "User: Fix the bug in src/app.py please." in transcript and "Assistant: Looking at it." in transcript
    assert "exec_command" in transcript and "def main(): retrun 1" in transcript
    with pytest.raises(openai.NotFoundError):  # nothing stored
        await client(s).responses.retrieve(out["id"])


async def test_sdk_compact(serve):
    s = await serve([SHORT])
    out = await client(s).responses.compact(model=MODEL, input=HISTORY)
    assert [o.type for o in out.output] == ["compaction"] and out.usage.output_tokens > 0


async def test_second_pass_compresses(serve):
    s = await serve([LONG, SHORT])
    prompts = record_prompts(s)
    out = (await compact(s, max_compaction_tokens=40)).json()
    p = payload(out["output"][-1])
    assert p["mode"] == "compressed" and p["summary"] == SHORT
    assert LONG.startswith(prompts[1].req.messages[1].content) and "40 tokens" in prompts[1].req.messages[0].content
    assert out["usage"]["input_tokens"] == len(prompts[0].tokens) + len(prompts[1].tokens)  # both passes


async def test_still_over_budget_falls_back_to_newest_text(serve, demo_tok):
    s = await serve([LONG, LONG])
    out = (await compact(s, max_compaction_tokens=16)).json()
    p = payload(out["output"][-1])
    assert p["mode"] == "extractive"
    assert len(demo_tok.encode(p["summary"], add_special_tokens=False)) <= 16
    assert p["summary"] and "retrun 1".endswith(p["summary"][-8:])  # the newest text of the transcript


async def test_repetition_loop_is_a_failed_pass(serve):
    loop = "Next step: " + "the the the the " * 30
    s = await serve([loop, "never used"])
    prompts = record_prompts(s)
    out = (await compact(s)).json()
    assert payload(out["output"][-1])["mode"] == "extractive" and len(prompts) == 1


def test_guards():
    copied = summarise.INSTRUCTION.splitlines()[1] + "\nRequirements: fix it.\n" + summarise.INSTRUCTION.splitlines()[-1]
    assert summarise.drop_copied_lines(copied, summarise.INSTRUCTION) == "Requirements: fix it."
    assert summarise.looping("abc def " * 10) and summarise.looping("same line\n" * 4)
    assert not summarise.looping(SHORT) and not summarise.looping(LONG)


async def test_copied_instruction_lines_dropped(serve):
    s = await serve([summarise.INSTRUCTION.splitlines()[1] + "\n" + SHORT])
    out = (await compact(s)).json()
    assert payload(out["output"][-1])["summary"] == SHORT


async def test_compaction_item_fed_back(serve):
    s = await serve([SHORT, "Continuing."])
    prompts = record_prompts(s)
    item = (await compact(s)).json()["output"][-1]
    r = await client(s).responses.create(model=MODEL, instructions="INSTR", input=[
        {"type": "message", "role": "developer", "content": "DEV"}, item,
        {"type": "message", "role": "user", "content": "go on"}])
    req = prompts[1].req
    system = req.messages[0]  # the summary closes the system prompt (the model's own where the request has none)
    assert system.role == "system" and system.content == "INSTR\n\nDEV"
    assert compaction.CONTEXT_HEADER in req.system_note and SHORT in req.system_note
    assert [m.role for m in prompts[1].req.messages] == ["system", "user"]
    assert r.output_text == "Continuing."


async def test_foreign_compaction_item_refused(serve):
    s = await serve(["x"])
    foreign = base64.b64encode(json.dumps({"v": 9, "summary": "?"}).encode()).decode()
    for path, body in [("/v1/responses", {"model": MODEL}), ("/v1/responses/compact", {"model": MODEL})]:
        resp = await post(s, path, {**body, "input": [{"type": "compaction", "encrypted_content": foreign}]})
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["code"] == "compaction_payload_invalid"
        assert err["param"] == "input[0].encrypted_content"


async def test_compaction_trigger_stream(serve):
    s = await serve([SHORT])
    prompts = record_prompts(s)
    events = await sse_events(s, {"model": MODEL, "stream": True, "store": False, "instructions": "sys",
                                  "input": HISTORY + [{"type": "compaction_trigger"}],
                                  "tools": [{"type": "function", "name": "exec_command"}]})
    names = [n for n, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"]
    assert [d["sequence_number"] for _, d in events] == list(range(5))
    out = events[-1][1]["response"]["output"]
    assert len(out) == 1 and out[0]["type"] == "compaction" and payload(out[0])["summary"] == SHORT
    assert events[-1][1]["response"]["usage"]["input_tokens"] == len(prompts[0].tokens)
    assert prompts[0].req.tools == () and prompts[0].req.temperature == 0


async def test_compaction_trigger_non_stream_with_store_false_stores_nothing(serve):
    s = await serve([SHORT])  # (stored otherwise: test_responses_compaction_chained.py)
    r = await client(s).responses.create(model=MODEL, input=HISTORY + [{"type": "compaction_trigger"}], store=False)
    assert [o.type for o in r.output] == ["compaction"] and r.status == "completed"
    assert "kept" not in payload(r.output[0].model_dump())  # its summary is of every item: it carries none
    with pytest.raises(openai.NotFoundError):
        await client(s).responses.retrieve(r.id)


def test_transcript_leaves_out_the_standing_prompt():
    text = compaction.transcript([
        {"type": "message", "role": "developer", "content": "You are Codex, with a very long prompt."},
        {"type": "message", "role": "user", "content": "hello"},
        {"type": "message", "role": "developer", "content": "The user switched models."},
        {"type": "function_call", "call_id": "c", "name": "read_file", "namespace": "mcp__files__", "arguments": "{}"}])
    assert "very long prompt" not in text
    assert text.splitlines()[0] == "User: hello" and "System: The user switched models." in text
    assert "mcp__files__.read_file({})" in text


@pytest.mark.parametrize("items", [
    [],
    [{"type": "message", "role": "developer", "content": "You are a coding agent."}],
    [{"type": "reasoning", "summary": [], "encrypted_content": "x"}],
])
async def test_nothing_to_compact_is_refused_not_invented(serve, items):
    s = await serve(["An invented summary."])
    for r in (await compact(s, model=MODEL, input=items),
              await post(s, "/v1/responses", {"model": MODEL, "input": items + [{"type": "compaction_trigger"}]})):
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "input"  # (an empty input list is a missing one to the compactor)
        assert r.json()["error"]["code"] in ("empty_input", "missing_required_parameter")
    assert s.engine.backend.tokens_decoded == 0


def test_a_payload_is_decoded_once_and_what_it_carries_is_the_requests_own():
    """A request reads an item's payload three times: it is decoded once. The turn it carries is copied into
    each request's items, so a request that changes its items changes no later request's."""
    kept = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now run the tests."}]}]
    content = compaction.encode("They asked for tests.", "auto", "m", kept)
    assert compaction.decode(content, "input[0]") is compaction.decode(content, "input[0]")
    items = [{"type": "compaction", "encrypted_content": content}]
    first = compaction.superseded(items)
    first[1]["content"][0]["text"] = "changed"
    assert compaction.superseded(items)[1] == kept[0]


async def test_a_client_that_hangs_up_mid_summary_is_counted_for_what_was_decoded(serve):
    """A compaction turn's summary is decoded in passes of its own: a client that hangs up during one is counted
    (log line, metrics, dashboard) for the tokens it decoded, as for any generation it hung up on."""
    import httpx
    import trio

    s = await serve(script=[{"output": "summary " * 300, "delay_ms": 20}, "after"])
    body = {"model": MODEL, "input": HISTORY + [{"type": "compaction_trigger"}], "stream": True}
    async with httpx.AsyncClient(timeout=30) as c:
        async with c.stream("POST", s.url("/v1/responses"), json=body) as r:
            async for _ in r.aiter_lines():
                with trio.fail_after(10):
                    while s.engine.backend.tokens_decoded < 5:  # the summary pass is decoding
                        await trio.sleep(0.01)
                break  # hang up
        with trio.fail_after(10):  # its record is kept once its request has ended
            while not s.server.observer.recent():
                await trio.sleep(0.02)
    [cancelled] = s.server.observer.recent()
    assert cancelled["stop_reason"] == "cancelled"
    assert 5 <= cancelled["completion_tokens"] <= s.engine.backend.tokens_decoded < 300

"""Review findings for the Responses API: each test pins one behaviour the API (or issue 4) defines and the
server got wrong."""

from __future__ import annotations

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

from responses_helpers import MODEL, post, record_prompts


async def test_null_sampling_fields_echo_the_values_used(serve):
    # The SDK sends an explicit None as JSON null; null means "absent", so the object reports the values the
    # decoder actually used (the backend's defaults), never null.
    s = await serve(["ok"])
    r = (await post(s, "/v1/responses", {"model": MODEL, "input": "hi", "temperature": None, "top_p": None,
                                         "presence_penalty": None, "frequency_penalty": None})).json()
    assert r["status"] == "completed"
    assert r["temperature"] == 0.7 and r["top_p"] == 0.95
    assert r["presence_penalty"] == 0.0 and r["frequency_penalty"] == 0.0


async def test_input_repeating_an_item_of_the_previous_response_chain_is_refused(serve):
    # The API refuses an input item (or an item_reference) whose id is already in the previous_response_id
    # chain ("Duplicate item found with id …"): replaying it would put the same turn in the prompt twice.
    s = await serve(["First.", "Second."])
    prompts = record_prompts(s)
    r1 = (await post(s, "/v1/responses", {"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": "Q1", "id": "msg_q1"}]})).json()
    out_id = r1["output"][0]["id"]
    for i, item in enumerate([{"type": "item_reference", "id": "msg_q1"}, {"type": "item_reference", "id": out_id},
                              {"type": "message", "role": "user", "content": "Q1", "id": "msg_q1"}]):
        resp = await post(s, "/v1/responses", {"model": MODEL, "previous_response_id": r1["id"],
                                               "input": [{"type": "message", "role": "user", "content": "Q2"}, item]})
        err = resp.json()["error"]
        assert resp.status_code == 400, (i, resp.json())
        assert err["param"] == "input[1]" and "Duplicate item" in err["message"], err
    assert len(prompts) == 1  # nothing reached the model
    ok = await post(s, "/v1/responses", {"model": MODEL, "previous_response_id": r1["id"], "input": "Q2"})
    assert ok.status_code == 200
    assert [m.content for m in prompts[-1].req.messages] == ["Q1", "First.", "Q2"]


async def test_compaction_measures_against_the_named_models_context_window(serve, demo_tok):
    # Two models: the transcript must be fitted to the window of the model named in the request, not to the
    # default (resident) model's larger one — else the summary prompt overflows the small model.
    summary = "Requirements: keep going. Next step: continue."
    big = ScriptedBackend([ScriptEntry(summary)], demo_tok, model_id="big", context_window=32768)
    small = ScriptedBackend([ScriptEntry(summary)], demo_tok, model_id="small", context_window=2048)
    s = await serve(backend=[big, small])
    history = [{"type": "message", "role": "user", "content": "Please read this log. " + "line of text " * 1500},
               {"type": "message", "role": "assistant", "content": "Read it."}]
    resp = await post(s, "/v1/responses/compact", {"model": "small", "input": history})
    assert resp.status_code == 200, resp.json()
    assert resp.json()["output"][-1]["type"] == "compaction"
    assert resp.json()["usage"]["input_tokens"] < 2048


async def test_compaction_under_the_fast_name_keeps_the_handover_instruction(serve):
    # '<id>-fast' strips a client's system prompt for quick chat answers; a compaction pass is not chat: its
    # handover instruction must reach the model whichever name the client used.
    s = await serve(["Requirements: fix it. Next step: run tests."])
    prompts = record_prompts(s)
    resp = await post(s, "/v1/responses/compact", {"model": MODEL + "-fast", "input": [
        {"type": "message", "role": "user", "content": "Fix src/app.py"}]})
    assert resp.status_code == 200, resp.json()
    system = prompts[0].req.messages[0]
    assert system.role == "system" and "handover" in system.content
    assert "Fix src/app.py" in prompts[0].req.messages[1].content


async def test_item_reference_without_a_type_is_an_item_reference(serve):
    # The API's ItemReference has an optional `type` (the SDK's ItemReference param: `id` required, `type`
    # Optional): `{"id": …}` alone, or with `type: null`, references a stored item.
    s = await serve(["Paris.", "Yes."])
    prompts = record_prompts(s)
    r1 = (await post(s, "/v1/responses", {"model": MODEL, "input": "Capital of France?"})).json()
    answer = r1["output"][0]["id"]
    for ref in ({"id": answer}, {"id": answer, "type": None}):
        resp = await post(s, "/v1/responses", {"model": MODEL, "input": [
            {"role": "user", "content": "Capital of France?"}, ref, {"role": "user", "content": "Sure?"}]})
        assert resp.status_code == 200, resp.json()
        assert [m.content for m in prompts[-1].req.messages] == ["Capital of France?", "Paris.", "Sure?"]
    missing = await post(s, "/v1/responses", {"model": MODEL, "input": [{"id": "msg_nothing"}]})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "input[0].id"


def test_loop_guard_spares_tables_and_catches_loops():
    from tinytitan.engine.summarise import looping

    table = "| file | change | owner | status | note | risk | test |\n| --- | --- | --- | --- | --- | --- | --- |\n"
    table += "| a.py | add | me | done | ok | low | yes |\n"
    assert not looping("## Facts\n" + table + "- next: run tests\n")
    assert looping("The plan is to fix the bug. " * 6)
    assert looping("ab " * 20)
    assert looping("\n".join(["- check the cache again"] * 4))

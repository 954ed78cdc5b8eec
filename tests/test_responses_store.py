"""The Responses store: kept across a restart (two servers over one directory), torn-record recovery,
the newest-N bound, deletes that persist, memory mode, the default directory."""

from __future__ import annotations

import json
import logging

import openai
import pytest

from tinytitan.cli import build_parser
from tinytitan.store.responses_store import FILE_NAME, ResponsesStore, StoredResponse, default_dir

from responses_helpers import MODEL, client, record_prompts


async def test_restart_keeps_stored_responses(serve, tmp_path):
    first = await serve(["Before the restart.", "Second."], responses_store=str(tmp_path))
    c1 = client(first)
    r1 = await c1.responses.create(model=MODEL, input=[{"role": "user", "content": "a"},
                                                       {"role": "user", "content": "b"}])
    r2 = await c1.responses.create(model=MODEL, input="gone soon")
    await c1.responses.delete(r2.id)

    second = await serve(["After the restart."], responses_store=str(tmp_path))  # a new process, same directory
    prompts = record_prompts(second)
    c2 = client(second)
    again = await c2.responses.retrieve(r1.id)
    assert again.output_text == "Before the restart." and again.id == r1.id
    items = await c2.responses.input_items.list(r1.id, order="asc")
    assert [i.content[0].text for i in items.data] == ["a", "b"]
    with pytest.raises(openai.NotFoundError):
        await c2.responses.retrieve(r2.id)  # the delete persisted too
    r3 = await c2.responses.create(model=MODEL, input="c", previous_response_id=r1.id)
    assert [m.content for m in prompts[0].req.messages] == ["a", "b", "Before the restart.", "c"]
    assert r3.previous_response_id == r1.id


async def test_torn_last_record_is_skipped(serve, tmp_path, caplog):
    s = await serve(["Kept.", "Also kept."], responses_store=str(tmp_path))
    c = client(s)
    kept = await c.responses.create(model=MODEL, input="one")
    kept2 = await c.responses.create(model=MODEL, input="two")
    log = tmp_path / FILE_NAME
    whole = log.read_bytes()
    last = whole.rstrip(b"\n").rfind(b"\n") + 1
    log.write_bytes(whole[: last + (len(whole) - last) // 2])  # a crash in the middle of the last write

    caplog.set_level(logging.WARNING, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path))
    assert "torn last record" in caplog.text
    assert store.get(kept.id) is not None and store.get(kept2.id) is None
    assert log.read_bytes() == whole[:last]  # cut back to the last whole record
    store.put(StoredResponse("resp_new", [], [{"response": {"id": "resp_new"}}]))
    reopened = ResponsesStore.open(str(tmp_path))
    assert reopened.get("resp_new") is not None and reopened.get(kept.id) is not None

    s2 = await serve(["x"], responses_store=str(tmp_path))
    assert (await client(s2).responses.retrieve(kept.id)).output_text == "Kept."


def test_unreadable_middle_record_skipped(tmp_path, caplog):
    rec = lambda i: json.dumps({"op": "put", "id": f"r{i}", "input": [], "events": []})  # noqa: E731
    (tmp_path / FILE_NAME).write_text(rec(1) + "\n{garbage\n" + rec(2) + "\n")
    caplog.set_level(logging.WARNING, "tinytitan.store")
    store = ResponsesStore.open(str(tmp_path))
    assert list(store.records) == ["r1", "r2"] and "unreadable record" in caplog.text


def test_newest_kept_and_log_rewritten(tmp_path):
    store = ResponsesStore.open(str(tmp_path), keep=3)
    for i in range(20):
        store.put(StoredResponse(f"r{i}", [{"id": f"in{i}"}], []))
    assert list(store.records) == ["r17", "r18", "r19"]
    assert store.find_item("in18") == {"id": "in18"} and store.find_item("in3") is None
    lines = (tmp_path / FILE_NAME).read_text().splitlines()
    assert len(lines) <= 2 * 3 + 1  # rewritten with the live records once it grew
    assert list(ResponsesStore.open(str(tmp_path), keep=3).records) == ["r17", "r18", "r19"]


def test_memory_store_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = ResponsesStore.open("memory")
    store.put(StoredResponse("r", [], []))
    assert store.get("r") is not None and store.path is None and not any(tmp_path.iterdir())


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_dir() == tmp_path / "state" / "tinytitan" / "responses"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_dir() == tmp_path / ".local" / "state" / "tinytitan" / "responses"


def test_cli_flag():
    args = build_parser().parse_args(["serve", "--responses-store", "memory"])
    assert args.responses_store == "memory"
    assert build_parser().parse_args(["serve"]).responses_store is None  # the state directory

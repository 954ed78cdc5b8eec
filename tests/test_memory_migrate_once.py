"""An older journal that is migrated but cannot be moved aside (a directory that cannot be written) is never
replayed again: every start replayed it over what memory had become since, bringing back the keys the model had
deleted and the values it had corrected."""

from __future__ import annotations

import json
import logging

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.memory import migrate
from tinytitan.memory.migrate import JOURNAL
from tinytitan.memory.scope import workspace_id
from tinytitan.memory.service import Memory, MemoryConfig


def test_a_journal_that_cannot_be_moved_is_migrated_once(tmp_path, monkeypatch, caplog):
    old = tmp_path / "memory" / "tinytitan" / "me" / workspace_id("/src/proj")
    old.mkdir(parents=True)
    lines = [{"op": "workspace", "path": "/src/proj", "at": 1.0},
             {"op": "set", "key": "build/command", "value": "make", "at": 10.0},
             {"op": "set", "key": "wrong", "value": "a fact that turned out false", "at": 11.0}]
    (old / JOURNAL).write_text("".join(json.dumps(x) + "\n" for x in lines))

    def read_only(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(migrate.os, "replace", read_only)
    caplog.set_level(logging.WARNING, "tinytitan.memory")
    cfg = MemoryConfig(directory=tmp_path / "memory", state=str(tmp_path / "state"), launch_dir="/src/proj",
                       user="me", home="/home/me", consolidate=0)
    req = ChatRequest(model="m", messages=(Message("user", "hi"),))
    memory = Memory(cfg)
    ws = memory.session(req).workspace
    assert ws.get("build/command").value == "make"
    ws.set("build/command", "make -j2")  # corrected, and the false fact deleted, by the model
    assert ws.delete("wrong")
    memory.close()
    for _ in range(2):  # restarts: the journal is still there
        memory = Memory(cfg)
        ws = memory.session(req).workspace
        assert (old / JOURNAL).exists()
        assert ws.get("build/command").value == "make -j2" and ws.get("wrong") is None
        memory.close()
    assert "is migrated but cannot be renamed" in caplog.text

"""`tinytitan memory forget` forgets the workspace's conversation waiting to be consolidated too: else the
consolidator writes the forgotten conversation's facts back."""

from __future__ import annotations

import trio

from memory_helpers import ANSWER, FACTS, SET_CALL, config, converse, memory_server, on_disk
from tinytitan.memory.scope import workspace_id


async def test_forget_also_forgets_the_conversation_waiting_to_be_consolidated(tmp_path, demo_tok, capsys,
                                                                                monkeypatch):
    from tinytitan.cli import main

    cfg = config(tmp_path, consolidate=1.0)
    async with memory_server(demo_tok, [SET_CALL, ANSWER, FACTS], cfg) as s:
        consolidator, passed = s.engine.consolidator, trio.Event()
        real = consolidator.consolidate

        async def consolidate(act):
            try:
                return await real(act)
            finally:
                passed.set()

        monkeypatch.setattr(consolidator, "consolidate", consolidate)
        await converse(s, "chat", stream=False)  # writes build/command, and leaves a transcript to consolidate
        assert on_disk(cfg.directory).get("build/command") is not None
        code = main(["memory", "--memory-dir", str(cfg.directory), "--user", "tester", "forget",
                     workspace_id("/src/the-repo"), "--yes"])
        assert code == 0 and "forgot 1 records" in capsys.readouterr().out
        with trio.fail_after(20):  # the workspace goes quiet: its consolidation pass (which would write back) ends
            await passed.wait()
        left = [r.key for r in on_disk(cfg.directory).list()]
    assert left == [], f"forgotten, then written back: {left}"

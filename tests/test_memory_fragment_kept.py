"""A conversation is shown the memory listing of its first request on every later turn: on another server of the
same database and after a restart too (the prompt cache on disk outlives a restart: a listing that moved would
make the next turn a full re-read); a new conversation sees what memory holds now."""

from __future__ import annotations

import openai

from responses_helpers import record_prompts
from memory_helpers import FACT, MODEL, SET_CALL, SYSTEM, config, memory_server, req


async def ask(s, messages) -> str:
    async with openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0) as c:
        r = await c.chat.completions.create(model=MODEL, messages=messages)
    return r.choices[0].message.content


async def test_a_conversation_keeps_its_listing_across_a_restart(tmp_path, demo_tok):
    cfg = config(tmp_path)
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How do I build this?"}]
    async with memory_server(demo_tok, [SET_CALL, "Saved."], cfg) as s:
        first = record_prompts(s)
        answer = await ask(s, turn)
    turn += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    async with memory_server(demo_tok, ["Second turn.", "Fresh."], cfg) as s:  # a restart (or another server)
        later = record_prompts(s)
        await ask(s, turn)
        await ask(s, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is here?"}])
    opening = first[0].prompt_text.split("How do I build this?")[0]
    assert "Memory is empty" in opening and FACT not in opening
    assert later[0].prompt_text.startswith(opening)  # the prefix the cache holds, read again
    assert f"- build/command (importance 4): {FACT}" in later[1].prompt_text  # a new conversation: as it is now


def test_forget_deletes_the_workspaces_kept_listings(tmp_path):
    import json

    from tinytitan.memory.service import Memory

    memory = Memory(config(tmp_path))
    session = memory.session(req("Working directory: /src/the-repo"))
    session.run("memory_set", json.dumps({"key": "a", "value": "b"}))
    assert memory.db.run(lambda tx: tx.row("SELECT count(*) FROM memory_fragments"))[0] == 1
    memory.close()
    from tinytitan import cli

    code = cli.main(["memory", "--memory-dir", str(tmp_path / "memory"), "--user", "tester", "forget",
                     "/src/the-repo", "--yes"])
    assert code == 0
    memory = Memory(config(tmp_path))
    assert memory.db.run(lambda tx: tx.row("SELECT count(*) FROM memory_fragments"))[0] == 0
    memory.close()


async def test_a_key_deleted_from_the_command_line_is_not_shown_again_after_a_restart(tmp_path, demo_tok):
    """``tinytitan memory delete`` is how a person corrects memory (a wrong fact, a secret saved by mistake): the
    listings kept for the workspace's conversations are dropped with it, so after a restart no conversation is
    shown it again from the database."""
    from memory_helpers import on_disk
    from tinytitan import cli

    cfg = config(tmp_path)
    ws = on_disk(cfg.directory)
    ws.set("build/command", FACT, importance=4)
    ws.db.close()
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How do I build this?"}]
    async with memory_server(demo_tok, ["First."], cfg) as s:
        first = record_prompts(s)
        answer = await ask(s, turn)
    assert FACT in first[0].prompt_text
    assert cli.main(["memory", "--memory-dir", str(cfg.directory), "--user", "tester", "delete", "/src/the-repo",
                     "build/command"]) == 0
    turn += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    async with memory_server(demo_tok, ["Second turn."], cfg) as s:  # a restart
        later = record_prompts(s)
        await ask(s, turn)
    assert FACT not in later[0].prompt_text

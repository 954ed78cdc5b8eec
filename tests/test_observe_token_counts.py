"""The tokens a turn counts beyond one plain answer: compaction passes (asked for, and on the way to an answer),
trace summaries, a stream the client left, and choices left unfinished."""

from __future__ import annotations

import httpx
import pytest

from observe_helpers import MODEL, counting, eventually, scrape, tokens
from compaction_helpers import INPUT, SUMMARY

async def test_compaction_passes_count_their_tokens(serve):
    """Codex's compactions run the model too: /v1/responses/compact and a compaction_trigger turn move the
    token counters by the usage they report, and the log line names the model."""
    s = await serve(["Requirements: fix app.py."])
    history = [{"type": "message", "role": "user", "content": "Fix the bug in app.py please."},
               {"type": "message", "role": "assistant", "content": "Looking at it."}]
    for path, body in (("/v1/responses/compact", {"input": history}),
                       ("/v1/responses", {"input": history + [{"type": "compaction_trigger"}], "store": False})):
        before = await scrape(s)
        async with httpx.AsyncClient() as c:
            r = await c.post(s.url(path), json={"model": MODEL, **body})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0

        async def moved():
            after = await scrape(s)
            return after if tokens(after, "prompt") > tokens(before, "prompt") else None

        after = await eventually(moved)
        assert after, f"{path}: the compaction's tokens were not counted"
        assert tokens(after, "prompt") - tokens(before, "prompt") == usage["input_tokens"]
        assert tokens(after, "completion") - tokens(before, "completion") == usage["output_tokens"]


async def test_a_cancelled_stream_counts_the_tokens_it_decoded(serve, demo_tok):
    """A client that hangs up mid-stream (Esc in a coding agent) still used the tokens decoded for it: the
    counters move by the prompt and by exactly what the engine decoded before it stopped."""
    from tinytitan.engine.backends.scripted import ScriptEntry

    decoded: list[int] = []
    s = await serve(backend=counting(decoded, [ScriptEntry("word " * 400, delay_ms=10)], demo_tok))
    before = await scrape(s)
    async with httpx.AsyncClient() as c:
        async with c.stream("POST", s.url("/v1/chat/completions"), json={
                "model": MODEL, "stream": True, "messages": [{"role": "user", "content": "talk"}]}) as r:
            lines = 0
            async for line in r.aiter_lines():
                lines += line.startswith("data: ")
                if lines >= 5:
                    break  # hang up

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "completion") > tokens(before, "completion") else None

    after = await eventually(moved)
    assert after and decoded, "the cancelled stream's tokens were not counted"
    (n,) = decoded
    assert 0 < n < 400 and tokens(after, "completion") - tokens(before, "completion") == n
    assert tokens(after, "prompt") > tokens(before, "prompt")
    (turn,) = s.server.observer.recent()
    assert turn["stop_reason"] == "cancelled" and turn["completion_tokens"] == n


TRACE = {"id": "trace-1", "metadata": {"source_path": "/tmp/rollout.jsonl"},
         "items": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}]}


async def test_trace_summarize_counts_the_tokens_of_every_trace(serve):
    """Codex's memories summarise several traces in one request: every trace's passes are counted."""
    s = await serve(["Summary."] * 6)
    deltas = []
    for traces in ([TRACE], [TRACE, {**TRACE, "id": "trace-2"}]):
        before = await scrape(s)
        async with httpx.AsyncClient() as c:
            r = await c.post(s.url("/v1/memories/trace_summarize"), json={"model": MODEL, "traces": traces})
        assert r.status_code == 200, r.text

        async def moved():
            after = await scrape(s)
            return after if tokens(after, "prompt") > tokens(before, "prompt") else None

        after = await eventually(moved)
        deltas.append((tokens(after, "prompt") - tokens(before, "prompt"),
                       tokens(after, "completion") - tokens(before, "completion")))
    one, two = deltas
    assert two == (2 * one[0], 2 * one[1]), deltas


async def test_a_turn_compacted_on_the_way_counts_its_summary_pass(serve, demo_tok):
    """A Responses turn under context_management compacts before it answers: the summary pass's tokens are
    counted with the reply's, as /v1/responses/compact counts its passes."""
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("Running them now.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    before = await scrape(s)
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/responses"), json=dict(
            model=MODEL, input=INPUT, store=False,
            context_management=[{"type": "compaction", "compact_threshold": 20}]))
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "prompt") > tokens(before, "prompt") else None

    after = await eventually(moved)
    summary_prompt, _ = backend.prompts
    summary_pass = len(demo_tok.encode(summary_prompt, add_special_tokens=False))
    counted = tokens(after, "prompt") - tokens(before, "prompt")
    # the model read the summary pass's prompt too: the counter moves by it and the reply's own prompt
    assert counted == usage["input_tokens"] + summary_pass, (counted, usage, summary_pass)


async def _compacted_stream(s, lines_before_leaving: int | None = None) -> dict | None:
    """A streamed Responses turn under context_management that compacts first; the client leaves after that
    many text deltas (None: it reads to the end). The completed response's usage, when it got that far."""
    import json

    async with httpx.AsyncClient() as c:
        async with c.stream("POST", s.url("/v1/responses"), json=dict(
                model=MODEL, input=INPUT, store=False, stream=True,
                context_management=[{"type": "compaction", "compact_threshold": 20}])) as r:
            deltas = 0
            async for line in r.aiter_lines():
                deltas += '"response.output_text.delta"' in line
                if lines_before_leaving is not None and deltas >= lines_before_leaving:
                    return None
                if line.startswith("data: ") and '"response.completed"' in line:
                    return json.loads(line[6:])["response"]["usage"]
    return None


async def test_a_streamed_compacted_turn_counts_its_summary_pass_once(serve, demo_tok):
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("Running them now.")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    before = await scrape(s)
    usage = await _compacted_stream(s)

    async def moved():
        after = await scrape(s)
        return after if tokens(after, "prompt") > tokens(before, "prompt") else None

    after = await eventually(moved)
    summary_pass = len(demo_tok.encode(backend.prompts[0], add_special_tokens=False))
    assert tokens(after, "prompt") - tokens(before, "prompt") == usage["input_tokens"] + summary_pass


async def test_a_compacted_turn_the_client_leaves_counts_its_summary_and_what_the_reply_decoded(serve, demo_tok):
    from backends import Recording
    from tinytitan.engine.backends.scripted import ScriptEntry

    backend = Recording([ScriptEntry(SUMMARY), ScriptEntry("word " * 400, delay_ms=10)], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    summary = len(demo_tok.encode(SUMMARY, add_special_tokens=False))
    await _compacted_stream(s, lines_before_leaving=5)

    async def ended():
        turns = s.server.observer.recent()
        return turns if turns and turns[0]["stop_reason"] == "cancelled" else None

    (turn,) = await eventually(ended)
    assert turn["completion_tokens"] > summary  # the summary's, and the reply's decoded before the hang-up


class _Session:
    """An engine session that read a prompt of ``prompt_tokens`` and decoded ``decoded`` (completion, reasoning),
    its events never read (its client left)."""

    def __init__(self, prompt_tokens: int, decoded: tuple[int, int]):
        self.prompt_tokens, self.decoded = prompt_tokens, decoded

    def __aiter__(self):
        return self


@pytest.mark.parametrize("began", [False, True])
def test_choices_left_unfinished_count_whether_or_not_the_first_had_started(began):
    """Several choices, the client gone: what the others decoded counts (their prompts where theirs count), also
    where the first never started (still reading its prompt while another prompt's choices decoded)."""
    from types import SimpleNamespace

    from tinytitan.events import Started
    from tinytitan.observe.turn import Turn, beside, current_turn, watch

    turn = Turn("POST", "/v1/completions", "127.0.0.1", "test")
    token = current_turn.set(turn)
    try:
        watch(_Session(7, (2, 0)), SimpleNamespace(model="m", tools=()), stream=True)
        beside(_Session(5, (3, 1)), prompt=True)  # another prompt's first choice
        beside(_Session(5, (4, 0)), prompt=False)  # that prompt's second: its prompt counted once
    finally:
        current_turn.reset(token)
    if began:
        turn.see(Started(7))
    turn.cancelled()
    turn.count_unfinished()
    assert (turn.prompt_tokens, turn.completion_tokens, turn.reasoning_tokens) == (12, 9, 1)
    assert turn.stop_reason == "cancelled"

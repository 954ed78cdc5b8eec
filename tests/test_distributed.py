"""One model served by a group of two processes (MLX's ring backend on loopback, group_harness.py), tensor
parallel (the demo model): every protocol answers, streamed and not, exactly what one process answers
(greedy); requests batch, hang up, follow a JSON schema and force a tool call as on one machine; a rank killed
mid-answer fails that answer in its protocol's envelope (no hang), and the group reports itself broken
(``/health`` 503). One group serves the whole module; the kill comes last."""

from __future__ import annotations

import json
import signal
import socket
from types import SimpleNamespace
from pathlib import Path

import httpx
import pytest
import trio

import strict
from group_harness import MODEL, SCHEMA, Group, ask, ask_together, body, pipeline_model
from sse import parse_sse


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    g = Group(tmp_path_factory.mktemp("group"))
    try:
        g.health = g.wait()
        yield g
    finally:
        g.stop()


@pytest.fixture
async def one(serve, demo_backend):
    """The same model in one process (the reference)."""
    demo_backend.prompt_cache.clear()
    return await serve(backend=demo_backend)


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    return pipeline_model(tmp_path_factory.mktemp("qwen2") / "model")


# -- the tests ---------------------------------------------------------------------------------------------------
def test_the_group_names_its_ranks_and_what_each_holds(group):
    g = group.health["group"]
    assert (g["size"], g["backend"], g["sharding"], g["status"]) == (2, "ring", "tensor", "ok")
    assert httpx.get(group.base + "/health").status_code == 200 and g["broken_ranks"] == []
    host = socket.gethostname()[:64]
    assert g["ranks"] == [{"rank": r, "host": host, "holds": "1/2 of every layer (tensor parallel)"}
                          for r in range(2)]
    log = group.logs[0].read_text()
    assert "group of 2 (ring backend): rank 1 on" in log


@pytest.mark.parametrize("protocol", ["chat", "completions", "messages", "responses", "ollama"])
@pytest.mark.parametrize("stream", [False, True])
async def test_greedy_output_equals_one_process(group, one, protocol, stream):
    prompt = f"Say something about {protocol} {'streamed' if stream else 'whole'}."
    want = await ask(one.base, protocol, prompt, stream)
    got = await ask(group.base, protocol, prompt, stream)
    assert got == want and want


async def test_two_requests_sent_together_each_get_what_they_get_alone(group, one):
    prompts = ["First of two sent together.", "Second of the pair, a little longer than the first one."]
    want = [await ask(one.base, "chat", p, max_tokens=40) for p in prompts]
    batched = httpx.get(group.base + "/health").json()["group"]["batch_steps"]
    got = await ask_together(group.base, prompts, max_tokens=40)
    assert got == want
    g = httpx.get(group.base + "/health").json()["group"]
    assert g["batch_steps"] > batched  # they decoded together
    assert g["plan_broadcasts"] > 0 and 0 < g["plan_broadcast_share"] < 1 and g["steps"] > 0


async def test_a_conversation_goes_on_from_the_prompt_cache_on_every_rank(group, one):
    """Rank 0 takes a prefix from its prompt cache; each follower must take the same one from its own (or it
    stops, diverged: see lockstep.py), and the answer is still one process's. Both decode without drafts (a
    group does; a drafting row keeps one token less of its answer in the cache), so their cached counts agree."""
    first = [{"role": "user", "content": "Start of a conversation that goes on."}]
    answers = []
    for base in (group.base, one.base):
        async with httpx.AsyncClient(timeout=60) as c:
            r1 = (await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": first, "temperature": 0, "max_tokens": 16, "speculative": False})).json()
            turn = first + [r1["choices"][0]["message"], {"role": "user", "content": "And then?"}]
            r2 = (await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": turn, "temperature": 0, "max_tokens": 16, "speculative": False})).json()
        answers.append((r1["choices"][0]["message"]["content"], r2["choices"][0]["message"]["content"],
                        r2["usage"]["prompt_tokens_details"]["cached_tokens"]))
    assert answers[0] == answers[1] and answers[0][2] > 0


async def _held(c: httpx.AsyncClient, base: str) -> int:
    caches = (await c.get(base + "/health")).json()["prompt_cache"]
    return sum(cache["resident_entries"] for cache in caches.values())


LOOP = [{"role": "assistant", "content": "", "reasoning_content": "I should read the file first.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}]
READ_FILE = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


@pytest.mark.parametrize("case", ["reasoning off", "after a tool loop"])
async def test_a_later_turn_supersedes_the_entry_before_it_on_every_rank_alike(group, one, case):
    """A later turn's entry stands in for the earlier turn's (cache/memory.py): with reasoning off, the prompt
    parts from it only in the template's transient opening; after a tool loop's final answer (one that calls no
    tool), the template drops the loop's thinking once a user message follows. Every rank decides alike, from
    what rank 0's message says of each row's request and of how it ended (lockstep.py): the group keeps as many
    entries as one process, and a regenerated first turn then starts from the same prefix on every rank (a
    follower that kept another would stop, diverged)."""
    first = [{"role": "system", "content": f"You keep answers short ({case})."},
             {"role": "user", "content": "Look at a.py and name a colour."}]
    extra = {"reasoning_effort": "none"}
    if case == "after a tool loop":
        first, extra = first + LOOP, {"reasoning_effort": "high", "tools": READ_FILE}
    got = []
    for base in (group.base, one.base):
        async with httpx.AsyncClient(timeout=60) as c:
            async def turn(messages):
                r = await c.post(base + "/v1/chat/completions", json={
                    "model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 12, "speculative": False,
                    **extra})
                assert r.status_code == 200, r.text
                message = strict.chat_completion(r.json()).choices[0].message
                assert not message.tool_calls  # the answer is final
                return message.content, r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

            before = await _held(c, base)
            answer, _ = await turn(first)
            second = await turn(first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "More."}])
            kept = await _held(c, base) - before
            again = await turn(first)  # the first turn regenerated
        got.append((answer, second, kept, again))
    assert got[0] == got[1] and got[0][2] == 1, got
    assert httpx.get(group.base + "/health").json()["group"]["status"] == "ok"


async def test_rank_0_drafts_and_every_rank_verifies_the_drafts_in_step(group, one):
    """Prompt lookup on a group: rank 0 drafts, its plan carries each draft to the follower, and every rank
    verifies it in the same pass (lockstep.py). The answer is one process's without drafts, token for token, and
    drafted tokens were accepted (``/metrics``)."""
    import re

    from speculative_helpers import COPY_TEXT

    def accepted(metrics: str) -> float:
        found = re.search(r'tinytitan_draft_tokens_total\{[^}]*kind="accepted"[^}]*\} (\S+)', metrics)
        return float(found.group(1)) if found else 0.0

    messages = [{"role": "user", "content": "Show this again, exactly:\n" + COPY_TEXT}]
    answers = []
    async with httpx.AsyncClient(timeout=60) as c:
        before = accepted((await c.get(group.base + "/metrics")).text)
        for base, drafting in ((group.base, True), (one.base, False)):
            r = await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 80, "speculative": drafting})
            assert r.status_code == 200, r.text
            answers.append(strict.chat_completion(r.json()).choices[0].message.content)
        after = accepted((await c.get(group.base + "/metrics")).text)
    assert answers[0] == answers[1] and answers[0]
    assert after > before


async def test_rank_0_drafts_with_a_draft_model_alone_and_every_rank_verifies(tmp_path, one):
    """``--draft-model`` on a group (every rank started with it, as ``mlx.launch`` starts them): rank 0 alone loads
    the draft model and drafts with it; the plan carries each draft, and every rank verifies it in step. Here
    the draft model is the served model itself (its greedy guesses are the answer), so drafts are accepted; the
    answers, alone and two sent together, are one process's without drafts, token for token."""
    import re

    from speculative_helpers import COPY_TEXT
    from tinytitan.demo_model import ensure_demo_model

    drafting = Group(tmp_path, "--draft-model", str(ensure_demo_model()), "--num-draft-tokens", "4",
                     "--prompt-lookup", "off")  # (its drafts can come from the draft model only)
    try:
        drafting.wait()
        prompts = ["Show this again, exactly:\n" + COPY_TEXT, "Say something about drafting on two ranks."]
        want = [await ask(one.base, "chat", p, max_tokens=48, speculative=False) for p in prompts]
        assert [await ask(drafting.base, "chat", p, max_tokens=48) for p in prompts] == want
        assert await ask_together(drafting.base, prompts, max_tokens=48) == want
        metrics = httpx.get(drafting.base + "/metrics").text
        found = re.search(r'tinytitan_draft_tokens_total\{[^}]*kind="accepted"[^}]*\} (\S+)', metrics)
        assert found and float(found.group(1)) > 0, metrics
        assert httpx.get(drafting.base + "/health").json()["group"]["status"] == "ok"
    finally:
        drafting.stop()
    logs = [log.read_text() for log in drafting.logs]
    assert "loading the draft model" in logs[0] and "loading the draft model" not in logs[1]


async def test_a_stop_string_inside_a_verified_draft_leaves_every_rank_the_same_entry(group, one, demo_backend):
    """A stop string only rank 0 sees can end a row inside a draft the step verified: the follower accepted the
    whole draft, and keeps of the row what rank 0 kept (lockstep.py's ``e``), not its longer answer. The next
    turn, which sends the answer back whole, then reads as much cached on every rank (a follower that kept more
    would stop, diverged, and the group would break) and as on one process. The demo model's answers to these
    prompts fall into a loop that prompt lookup drafts; a stop string of the loop's k-th repetition ends the row
    inside a verified draft (found by measuring the kept tokens against the KV cache's)."""
    import re

    from speculative_helpers import COPY_TEXT

    async with httpx.AsyncClient(timeout=60) as c:
        async def chat(base, messages, **kw):
            r = await c.post(base + "/v1/chat/completions", json={
                "model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 120,
                "reasoning_effort": "high", **kw})
            assert r.status_code == 200, r.text
            body = strict.chat_completion(r.json())
            return body.choices[0].message.content, body.usage.prompt_tokens_details.cached_tokens

        for n, k in ((5, 8), (12, 6)):
            first = [{"role": "user", "content": f"({n}) Show this again, exactly:\n" + COPY_TEXT}]
            whole, _ = await chat(one.base, first, speculative=False)
            demo_backend.prompt_cache.clear()  # (its entry would serve the next turn: the group never wrote it)
            loop = re.search(r"(.{2,10}?)\1{5,}", whole, re.S)
            assert loop, whole
            stop = loop.group(1) * k
            got = []
            for base in (group.base, one.base):
                cut, _ = await chat(base, first, stop=[stop])
                answered = first + [{"role": "assistant", "content": whole}, {"role": "user", "content": "Again."}]
                got.append((cut, await chat(base, answered, max_tokens=4)))
            assert got[0] == got[1] and got[0][0] == whole[:whole.index(stop)], (n, got)
    assert httpx.get(group.base + "/health").json()["group"]["status"] == "ok"


async def test_a_hang_up_mid_answer_leaves_the_group_in_step(group, one):
    path, payload = body("chat", "A long answer the client will not wait for.", True, max_tokens=400)
    async with httpx.AsyncClient(timeout=60) as c:
        async with c.stream("POST", group.base + path, json=payload) as r:
            seen = 0
            async for _line in r.aiter_lines():
                seen += 1
                if seen > 6:
                    break  # the client hangs up
    prompt = "After the hang-up."
    assert await ask(group.base, "chat", prompt, max_tokens=30) == await ask(one.base, "chat", prompt, max_tokens=30)
    with trio.fail_after(20):
        while httpx.get(group.base + "/health").json()["running"]:
            await trio.sleep(0.05)


async def test_a_json_schema_and_a_forced_tool_call_as_on_one_process(group, one):
    fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "rec", "schema": SCHEMA}}}
    got = await ask(group.base, "chat", "A record, please.", max_tokens=60, **fmt)
    assert got == await ask(one.base, "chat", "A record, please.", max_tokens=60, **fmt)
    assert set(json.loads(got)) == {"name", "count"}
    tools = {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}],
             "tool_choice": "required"}
    path, payload = body("chat", "Weather in Paris?", False, max_tokens=80, **tools)
    answers = []
    for base in (group.base, one.base):
        async with httpx.AsyncClient(timeout=60) as c:
            r = await c.post(base + path, json=payload)
        assert r.status_code == 200, r.text
        calls = strict.chat_completion(r.json()).choices[0].message.tool_calls
        answers.append([(c.function.name, c.function.arguments) for c in calls])
    assert answers[0] == answers[1] and answers[0][0][0] == "get_weather"


def test_the_sharding_is_what_the_model_offers_or_refused_by_its_type(pipeline_dir):
    from mlx_lm.utils import load_model

    from tinytitan.demo_model import ensure_demo_model
    from tinytitan.engine.group.ranks import Unshardable, sharding

    qwen3, _ = load_model(Path(ensure_demo_model()), lazy=True, strict=False)  # shard only
    qwen2, _ = load_model(pipeline_dir, lazy=True, strict=False)  # shard and pipeline
    assert [sharding(qwen3, "auto"), sharding(qwen3, "tensor")] == ["tensor", "tensor"]
    assert [sharding(qwen2, w) for w in ("auto", "tensor", "pipeline")] == ["tensor", "tensor", "pipeline"]
    with pytest.raises(Unshardable, match="the model type 'qwen3' offers no pipeline parallelism in mlx-lm"):
        sharding(qwen3, "pipeline")
    # 4 attention heads, 2 KV heads, an MLP 128 wide: 3 ranks cannot each take an equal part (every request
    # would fail on mismatched shapes), so tensor parallelism is refused by name, or pipeline taken where offered
    with pytest.raises(Unshardable, match="the model type 'qwen3' cannot be split by tensor parallelism across 3 "
                                         "ranks: its 4 attention heads, 2 KV heads, MLP width of 128 do not "
                                         "divide"):
        sharding(qwen3, "auto", 3)
    assert [sharding(qwen3, "auto", 2), sharding(qwen2, "auto", 2)] == ["tensor", "tensor"]
    # the qwen2 has 2 layers: pipeline parallelism gives each rank at least one, so 3 ranks cannot split it either
    with pytest.raises(Unshardable, match=r"across 3 ranks: .* \(nor can pipeline parallelism: it has 2 layers\)"):
        sharding(qwen2, "auto", 3)
    with pytest.raises(Unshardable, match="the model type 'qwen2' cannot be split by pipeline parallelism across 3 "
                                         "ranks: it has 2 layers"):
        sharding(qwen2, "pipeline", 3)
    four = SimpleNamespace(args=qwen2.args, shard=qwen2.shard, model=SimpleNamespace(
        pipeline=qwen2.model.pipeline, layers=[None] * 4))  # 4 layers: 3 ranks take pipeline where tensor is uneven
    assert sharding(four, "auto", 3) == "pipeline"
    with pytest.raises(Unshardable, match=r"across 3 ranks: .* \(--sharding pipeline can serve it\)"):
        sharding(four, "tensor", 3)
    with pytest.raises(Unshardable, match="the model type 'qwen3' offers no pipeline parallelism in mlx-lm"):
        sharding(qwen3, "pipeline", 3)
    # a model whose settings are its text model's (a vision model's text_config)
    vision = SimpleNamespace(args=SimpleNamespace(model_type="vlm", text_config={"num_attention_heads": 9,
                                                                                 "num_key_value_heads": 3}),
                             shard=lambda group=None: None)
    with pytest.raises(Unshardable, match="its 9 attention heads, 3 KV heads do not divide among them"):
        sharding(vision, "auto", 2)
    assert sharding(vision, "auto", 3) == "tensor"


async def test_a_killed_rank_fails_the_answer_in_flight_and_breaks_the_group(group):
    path, payload = body("messages", "A long answer that rank 1 will not see the end of.", True, max_tokens=2000)
    events = []
    with trio.fail_after(30):  # no hang
        async with httpx.AsyncClient(timeout=30) as c:
            async with c.stream("POST", group.base + path, json=payload) as r:
                assert r.status_code == 200
                raw = ""
                async for chunk in r.aiter_text():
                    raw += chunk
                    if group.procs[1].poll() is None and raw.count("content_block_delta") > 3:
                        group.procs[1].send_signal(signal.SIGKILL)
        events = strict.sse_events("messages", parse_sse(raw))
    error = events[-1][1]
    # the ring notices the lost peer, or the watchdog the step that never ends: either names rank 1
    message = error["error"]["message"]
    assert error["type"] == "error" and ("rank 0 lost rank 1" in message or "rank 1 died" in message), message
    r = httpx.get(group.base + "/health")
    health = r.json()
    assert r.status_code == 503  # what a load balancer or a script checks
    assert health["status"] == "broken" and health["group"]["status"] == "broken"
    assert health["error"]["ranks"] == [1] == health["group"]["broken_ranks"]
    assert health["error"]["message"] == health["group"]["error"] and "rank 1" in health["error"]["message"]
    assert health["running"] == 0
    for protocol, status in [("chat", 503), ("messages", 503), ("ollama", 503)]:
        path, payload = body(protocol, "Anyone there?", False)
        r = httpx.post(group.base + path, json=payload, timeout=10)
        assert r.status_code == status and "group of processes serving it is broken" in r.text, r.text
    strict.anthropic_error(httpx.post(group.base + "/v1/messages", json=body("messages", "x", False)[1]).json())
    assert group.procs[0].poll() is None  # rank 0 serves on (health, stored responses), refusing generation

"""Speculative decoding as served: a lone request drafts by default through the engine and answers as without
(greedy, seeded sampling, stop strings, the cap, the prompt cache), a draft model through the engine, the
command-line flags, the ``speculative`` field on every protocol, and what /profile, /metrics and the
dashboard's feed show. The parts themselves: test_speculative.py."""

from __future__ import annotations

import pytest

from speculative_helpers import COPY_TEXT, plain_decode


# -- through the engine: a lone request drafts by default --------------------------------------------------------
async def _turn(engine, req):
    from tinytitan.events import Finished, TextDelta

    text, finished = "", None
    async with engine.session(req) as events:
        async for ev in events:
            if isinstance(ev, TextDelta):
                text += ev.text
            elif isinstance(ev, Finished):
                finished = ev
    return text, finished


def _copy_request(model_id, **kw):
    from tinytitan.chat_request import ChatRequest, Message

    args = dict(max_tokens=80, temperature=0, reasoning=False)
    args.update(kw)
    return ChatRequest(model=model_id, messages=(Message("user", "Show this again, exactly:\n" + COPY_TEXT),),
                       **args)


@pytest.mark.parametrize("max_batch", [1, 4])
async def test_a_lone_request_drafts_by_default_and_answers_as_without(demo_backend, max_batch):
    from tinytitan.engine.engine import Engine

    engine = Engine(demo_backend, max_batch=max_batch)
    model_id = demo_backend.model_id
    demo_backend.prompt_cache.clear()
    on_text, on = await _turn(engine, _copy_request(model_id))
    demo_backend.prompt_cache.clear()
    off_text, off = await _turn(engine, _copy_request(model_id, speculative=False))
    assert on_text == off_text and on.usage == off.usage and on.reason == off.reason
    assert on.timing.draft_accepted_tokens > 0 and on.timing.draft_tokens >= on.timing.draft_accepted_tokens
    assert off.timing.draft_tokens == 0
    # the same answer as mlx-lm's own decode of the same prompt
    prepared = demo_backend.prepare(_copy_request(model_id))
    want = plain_decode(demo_backend.model, prepared.tokens, 80, eos=demo_backend.tokenizer.eos_token_ids)
    cut = len(want) - (want[-1] in demo_backend.tokenizer.eos_token_ids)  # (the end of turn is no answer token)
    assert on.usage.completion_tokens == cut


async def test_stop_strings_and_the_cap_cut_a_drafted_run_where_they_would_without(demo_backend):
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.cache.entries import kv_offset

    engine = Engine(demo_backend, max_batch=1)
    model_id = demo_backend.model_id
    demo_backend.prompt_cache.clear()
    full, _ = await _turn(engine, _copy_request(model_id, speculative=False))
    stop = full[-12:-8]  # late in the answer: drafts were accepted before it
    for kw in ({"stop": (stop,)}, {"max_tokens": 75}):
        answers = []
        for speculative in (True, False):
            demo_backend.prompt_cache.clear()
            answers.append(await _turn(engine, _copy_request(model_id, speculative=speculative, **kw)))
            # what the prompt cache keeps holds exactly the prompt and the answer's tokens
            [entry] = demo_backend.prompt_cache.entries.values()
            assert kv_offset(entry.payload) == len(entry.tokens)
        (a, fa), (b, fb) = answers
        assert a == b and fa.usage == fb.usage and fa.reason == fb.reason
        assert fa.timing.draft_accepted_tokens > 0


# -- the command line --------------------------------------------------------------------------------------------
def _swapped_tokenizer_model(source, target):
    """A copy of the model in ``source`` whose tokenizer gives two tokens each other's ids."""
    import json
    import shutil

    shutil.copytree(source, target)
    spec = json.loads((target / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (target / "tokenizer.json").write_text(json.dumps(spec))
    return target


def test_the_cli_draft_model_flags(demo_backend, tmp_path):
    from tinytitan.flags import build_parser
    from tinytitan.model_setup import make_backends

    def backends(*flags):
        return make_backends(build_parser().parse_args(["serve", "--model", str(demo_backend.path), *flags]))

    [b] = backends("--draft-model", str(demo_backend.path), "--num-draft-tokens", "2")
    assert b.speculative.draft_model == demo_backend.path and b.speculative.num_draft_tokens == 2
    assert b._draft is not None  # loaded with the model
    [b] = backends("--prompt-lookup", "off")
    assert not b.speculative.on
    other = _swapped_tokenizer_model(demo_backend.path, tmp_path / "other")
    with pytest.raises(SystemExit, match=r"--draft-model .*other: its tokenizer does not agree with the model's"):
        backends("--draft-model", str(other))
    with pytest.raises(SystemExit, match=r"--draft-model: "):
        backends("--draft-model", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match=r"--draft-model applies to --model"):
        make_backends(build_parser().parse_args(["serve", "--script", str(tmp_path / "s.yaml"),
                                                 "--draft-model", str(demo_backend.path)]))
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--num-draft-tokens", "0"])


async def test_a_draft_model_drafts_through_the_engine_and_answers_as_without(demo_backend):
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.speculative.speculator import SpeculativeConfig

    drafting = MLXBackend(demo_backend.path, demo_backend.model_id,
                          speculative=SpeculativeConfig(lookup=False, draft_model=demo_backend.path))
    plain = MLXBackend(demo_backend.path, demo_backend.model_id, speculative=SpeculativeConfig(lookup=False))
    req = _copy_request(demo_backend.model_id, max_tokens=40)
    a, fa = await _turn(Engine(drafting, max_batch=1), req)
    b, fb = await _turn(Engine(plain, max_batch=1), req)
    assert a == b and fa.usage == fb.usage
    assert fa.timing.draft_tokens > 0 and fa.timing.draft_accepted_tokens == fa.timing.draft_tokens
    assert fb.timing.draft_tokens == 0


# -- the request field, on every protocol --------------------------------------------------------------------------
WIRES = [
    ("/v1/chat/completions", lambda **kw: {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}),
    ("/v1/completions", lambda **kw: {"model": "m", "prompt": "hi", **kw}),
    ("/v1/responses", lambda **kw: {"model": "m", "input": "hi", **kw}),
    ("/v1/messages", lambda **kw: {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                                   **kw}),
    ("/api/chat", lambda **kw: {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False,
                                **kw}),
    ("/api/generate", lambda **kw: {"model": "m", "prompt": "hi", "stream": False, **kw}),
]


@pytest.mark.parametrize("path,body", WIRES, ids=[w[0] for w in WIRES])
async def test_speculative_false_in_the_body_reaches_the_engine_on_every_protocol(serve, path, body):
    import httpx

    from responses_helpers import record_prompts

    s = await serve(["Hello."], model_id="m")
    seen = record_prompts(s)
    headers = {"anthropic-version": "2023-06-01"} if path == "/v1/messages" else {}
    async with httpx.AsyncClient() as c:
        for sent, want in ((False, False), (True, True), (None, True)):
            extra = {} if sent is None else {"speculative": sent}
            r = await c.post(s.url(path), json=body(**extra), headers=headers)
            assert r.status_code == 200, r.text
            assert seen[-1].req.speculative is want
        r = await c.post(s.url(path), json=body(speculative="no"), headers=headers)
        assert r.status_code == 400 and "speculative" in r.text


# -- what the operator sees ------------------------------------------------------------------------------------------
async def test_profile_metrics_and_the_dashboard_feed_show_drafted_and_accepted_tokens(serve, demo_backend):
    import httpx
    import trio

    s = await serve(backend=demo_backend)
    demo_backend.prompt_cache.clear()
    body = {"model": demo_backend.model_id, "max_tokens": 80, "temperature": 0, "reasoning_effort": "none",
            "messages": [{"role": "user", "content": "Show this again, exactly:\n" + COPY_TEXT}]}
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/chat/completions"), json=body)
        assert r.status_code == 200
        r = await c.post(s.url("/v1/chat/completions"), json={**body, "speculative": False})
        assert r.status_code == 200
        with trio.fail_after(20):  # (each request's record is made once its answer is sent)
            while len(data := (await c.get(s.url("/profile"))).json()["data"]) < 2:
                await trio.sleep(0.02)
        drafting, plain = data
        assert 0 < drafting["draft_accepted_tokens"] <= drafting["draft_tokens"]
        assert plain["draft_tokens"] == plain["draft_accepted_tokens"] == 0
        metrics = (await c.get(s.url("/metrics"))).text
    model = demo_backend.model_id
    assert f'tinytitan_draft_tokens_total{{kind="drafted",model="{model}"}} {float(drafting["draft_tokens"])}' in metrics
    assert (f'tinytitan_draft_tokens_total{{kind="accepted",model="{model}"}} '
            f'{float(drafting["draft_accepted_tokens"])}') in metrics
    assert f'tinytitan_draft_accepted_ratio_count{{model="{model}"}} 1.0' in metrics
    # the dashboard's feed carries the same counts per turn
    turns = s.server.observer.recent()
    assert [t["draft_tokens"] for t in turns][-2:] == [drafting["draft_tokens"], 0]


@pytest.mark.parametrize("max_batch", [1, 4])
async def test_a_seeded_sampled_request_gives_the_same_tokens_with_drafts_as_without(demo_backend, max_batch):
    from tinytitan.engine.engine import Engine

    engine = Engine(demo_backend, max_batch=max_batch)
    answers = []
    for speculative in (True, False, True):
        demo_backend.prompt_cache.clear()
        answers.append(await _turn(engine, _copy_request(demo_backend.model_id, temperature=0.8, seed=1234,
                                                         max_tokens=40, speculative=speculative)))
    (a, fa), (b, fb), (c, _) = answers
    assert a == b == c and fa.usage == fb.usage
    greedy, _ = await _turn(engine, _copy_request(demo_backend.model_id, max_tokens=40, speculative=False))
    assert a != greedy  # really sampled

"""Fold fuzz: a non-streaming answer is the fold of the stream, on every protocol and every family.

Random raw outputs (text with unicode, reasoning blocks, calls in the family's markup: complete, cut, malformed,
unclosed; stop strings anywhere; small caps) are asked on Chat, legacy Completions, Responses, Messages,
Ollama /api/chat and /api/generate, streamed and not. Each stream is folded as the SDKs' own accumulators do
(openai ChatCompletionStreamState / ResponseStreamState, anthropic accumulate_event, ollama by concatenation)
and compared with the non-stream body; the protocols are compared with each other.

TINYTITAN_FOLDFUZZ_CASES (per family, default 3), TINYTITAN_FOLDFUZZ_SEED.
"""

from __future__ import annotations

import json
import os
import random
import re

import httpx
import pytest

import family_fixtures as ff
from output_fuzz_cases import Case
from protocol_folds import AH, FOLD, PROTOS, body

SEED = int(os.environ.get("TINYTITAN_FOLDFUZZ_SEED", "7"))
CASES = int(os.environ.get("TINYTITAN_FOLDFUZZ_CASES", "3"))  # (the suite: 3 a family; a hunt: more)
ONLY = os.environ.get("TINYTITAN_FOLDFUZZ_FAMILIES")

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "日本語", "漢字", "e\u0301clair", "🙂", "👩\u200d💻", "Ωμέγα",
         "x\u0308y", "中文テスト", "🚀🚀"]


def jdump(v):
    return json.dumps(v, ensure_ascii=False)


# -- families: how each writes reasoning and calls ------------------------------------------------------------
def _args(rng):
    return rng.choice([{"a": rng.randint(0, 99)}, {"q": rng.choice(WORDS)}, {"q": rng.choice(WORDS), "a": 3}, {},
                       {"q": "say \"" + rng.choice(WORDS) + "\" \\ back"}, {"q": "a}b{c]</x>"}])


def _kv_xml(args, kv):
    return "".join(kv(k, v if isinstance(v, str) else jdump(v)) for k, v in args.items())


FAMILIES = {
    "qwen": dict(think=("<think>", "</think>"),
                 call=lambda n, a: "<tool_call>\n" + jdump({"name": n, "arguments": a}) + "\n</tool_call>",
                 bad=['<tool_call>\n{"name": "f", "arguments": {"a": tru}}\n</tool_call>',
                      '<tool_call>\n{"name": "f", "arguments": {"q": "x', "<tool_call>", "</tool_call>",
                      '<tool_call>{"name": "f"}</tool_call>']),
    "qwen3_coder": dict(think=("<think>", "</think>"),
                        call=lambda n, a: f"<tool_call>\n<function={n}>\n" + _kv_xml(
                            a, lambda k, v: f"<parameter={k}>\n{v}\n</parameter>\n") + "</function>\n</tool_call>",
                        bad=["<tool_call>\n<function=f>\n<parameter=q>\nx", "<tool_call>\n<function=f>\n",
                             "</function>", "<tool_call>"]),
    "glm": dict(think=("<think>", "</think>"),
                call=lambda n, a: f"<tool_call>{n}\n" + _kv_xml(
                    a, lambda k, v: f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n") + "</tool_call>",
                bad=["<tool_call>f\n<arg_key>q</arg_key>\n<arg_value>x", "<tool_call>f", "<arg_value>",
                     "</tool_call>"]),
    "mistral": dict(think=("[THINK]", "[/THINK]"),
                    call=lambda n, a: f"[TOOL_CALLS]{n}[ARGS]" + jdump(a),
                    bad=['[TOOL_CALLS]f[ARGS]{"a": ', '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}, {"name": "f", "arguments": {}}]', "[TOOL_CALLS]", "[TOOL_CALLS]f[ARGS]{bad}", "[ARGS]"]),
    "deepseek_v3": dict(think=("<think>", "</think>"),
                        call=lambda n, a: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + n + "<｜tool▁sep｜>" + jdump(a)
                        + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                        bad=["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"q\": \"x",
                             "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>"]),
    "deepseek_r1": dict(think=("<think>", "</think>"),
                        call=lambda n, a: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + n
                        + "\n```json\n" + jdump(a) + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                        bad=["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"q\": \"x",
                             "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```",
                             "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
                             "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>", "```json"]),
    "kimi_k2": dict(think=None,
                    call=lambda n, a: "<|tool_calls_section_begin|><|tool_call_begin|>functions." + n
                    + ":0<|tool_call_argument_begin|>" + jdump(a) + "<|tool_call_end|><|tool_calls_section_end|>",
                    bad=["<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{",
                         "<|tool_calls_section_begin|>"]),
    "minimax_m2": dict(think=("<think>", "</think>"),
                       call=lambda n, a: f'<minimax:tool_call>\n<invoke name="{n}">\n' + _kv_xml(
                           a, lambda k, v: f'<parameter name="{k}">{v}</parameter>\n') + "</invoke>\n</minimax:tool_call>",
                       bad=['<minimax:tool_call>\n<invoke name="f">\n<parameter name="q">x', "<minimax:tool_call>"]),
    "gpt_oss": dict(think=("<|channel|>analysis<|message|>", "<|end|><|start|>assistant"),
                    call=lambda n, a: f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json"
                    "<|message|>" + jdump(a) + "<|call|>",
                    bad=["<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"q\": ",
                         "<|channel|>final<|message|>"]),
    "gemma": dict(think=None, call=lambda n, a: "```tool_code\n" + n + "(" + ", ".join(
        f"{k}={jdump(v)}" for k, v in a.items()) + ")\n```",
                  bad=["```tool_code\nf(q=", "```tool_code\n", "```"]),
    "llama3": dict(think=None, call=lambda n, a: "<|python_tag|>" + jdump({"name": n, "parameters": a}),
                   bad=['<|python_tag|>{"name": "f", "parameters": {"q": ', "<|python_tag|>"]),
}


def gen_output(fam: str, rng: random.Random) -> str:
    spec = FAMILIES[fam]
    out: list[str] = []
    if spec["think"] and rng.random() < 0.5:
        out += [spec["think"][0], " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))]
        if rng.random() < 0.85:
            out.append(spec["think"][1])
    if fam == "gpt_oss" and rng.random() < 0.6:
        out += ["<|channel|>final<|message|>"]
    if rng.random() < 0.7:
        out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))))
    for _ in range(rng.choice([0, 1, 1, 2])):
        c = spec["call"](rng.choice(["f", "f", "nope"]), _args(rng))
        r = rng.random()
        if r < 0.15:
            c = c[: rng.randint(1, len(c) - 1)]  # cut anywhere
        elif r < 0.25:
            c = rng.choice(spec["bad"])
        out.append(c)
        if rng.random() < 0.2:
            out.append(rng.choice(WORDS))
    if rng.random() < 0.2 and out:
        out.insert(rng.randrange(len(out) + 1), rng.choice(spec["bad"]))
    return rng.choice(["", "\n", " "]).join(out)


def make_case(fam, n, rng, tok) -> Case:
    out = gen_output(fam, rng)
    ids = tok.encode(out, add_special_tokens=False)
    cap = None
    if rng.random() < 0.4 and ids:
        cap = rng.randint(1, len(ids) + 1)
    stop = []
    if rng.random() < 0.35 and out:
        i = rng.randrange(len(out))
        piece = out[i: i + rng.randint(1, 6)]
        if piece.strip():
            stop.append(piece)
        if rng.random() < 0.3:
            stop.append(rng.choice(WORDS))
    return Case(n, out, rng.random() < 0.7, cap, list(dict.fromkeys(stop)))


# -- requests ---------------------------------------------------------------------------------------------------


# -- folds: (reasoning, text, calls, finish, output_tokens, stop_sequence, ids) -----------------------------------


def as_obj(args: str):
    try:
        v = json.loads(args)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def compare(case: Case, a: dict, tok) -> list[str]:
    bad = []

    def chk(cond, msg):
        if not cond:
            bad.append(msg)

    for p in PROTOS:
        ns, s = a[p]
        nk, sk = ns.key(), s.key()
        if p == "responses":
            nk = (ns.reasoning, ns.text, ns.calls, ns.finish, ns.tokens, ns.extra.get("incomplete"))
            sk = (s.reasoning, s.text, s.calls, s.finish, s.tokens, s.extra.get("incomplete"))
        chk(nk == sk, f"{p}: non-stream vs stream fold\n      ns={nk}\n      s ={sk}")
        if "reasoning_tokens" in ns.extra:
            chk(ns.extra["reasoning_tokens"] == s.extra["reasoning_tokens"],
                f"{p}: reasoning tokens {ns.extra['reasoning_tokens']} vs {s.extra['reasoning_tokens']}")
    # id formats
    for p, pat in (("chat", r"call_[A-Za-z0-9_-]+"), ("messages", r"(toolu|call)_[A-Za-z0-9_]+")):
        for t in a[p]:
            for i in t.ids:
                chk(re.fullmatch(pat, i), f"{p}: call id {i!r}")
    for t in a["responses"]:
        for iid, cid in t.ids:
            chk(iid.startswith("fc_") and cid.startswith("call_"), f"responses: ids {iid!r} {cid!r}")
    # across protocols (non-stream)
    chat, msg, oll, resp = a["chat"][0], a["messages"][0], a["ollama"][0], a["responses"][0]
    comp, gen = a["completions"][0], a["generate"][0]
    for name, t in (("messages", msg), ("ollama", oll)):
        chk((t.reasoning, t.text) == (chat.reasoning, chat.text),
            f"chat vs {name} text/reasoning\n      chat={(chat.reasoning, chat.text)!r}\n      {name}={(t.reasoning, t.text)!r}")
        want = [(n, as_obj(x)) for n, x in chat.calls]
        if chat.finish == "length" and want and t.calls and t.calls[-1] == (want[-1][0], {}):
            want[-1] = t.calls[-1]  # a call the cap cut is {} on Messages and Ollama (arguments_object)
        chk(want == t.calls, f"chat vs {name} calls {chat.calls} / {t.calls}")
        chk(t.tokens == chat.tokens, f"chat vs {name} tokens {chat.tokens} / {t.tokens}")
    chk(msg.calls == oll.calls, f"messages vs ollama calls {msg.calls} / {oll.calls}")
    fm = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
    chk(fm.get(msg.finish) == chat.finish, f"finish chat {chat.finish} vs messages {msg.finish}")
    chk(oll.finish == ("length" if chat.finish == "length" else "stop"), f"ollama finish {oll.finish} vs chat {chat.finish}")
    if not case.stop:
        chk((resp.reasoning, resp.text) == (chat.reasoning, chat.text),
            f"chat vs responses text/reasoning\n      chat={(chat.reasoning, chat.text)!r}\n      resp={(resp.reasoning, resp.text)!r}")
        chk([c[:2] for c in resp.calls] == chat.calls, f"chat vs responses calls {chat.calls} / {resp.calls}")
        chk(resp.tokens == chat.tokens, f"responses tokens {resp.tokens} vs chat {chat.tokens}")
        chk((resp.finish == "incomplete") == (chat.finish == "length"), f"responses {resp.finish} vs chat {chat.finish}")
        chk(resp.extra["reasoning_tokens"] == chat.extra["reasoning_tokens"],
            f"reasoning tokens responses {resp.extra['reasoning_tokens']} vs chat {chat.extra['reasoning_tokens']}")
    # completions: raw text of the generated tokens, cut by the cap (never inside a character) and the first stop
    # string
    ids = tok.encode(case.output, add_special_tokens=False)
    n = len(ids) if case.cap is None else min(case.cap, len(ids))
    raw = tok.decode(ids[:n])
    if raw.endswith("\ufffd") and tok.decode(ids)[len(raw) - 1:len(raw)] != "\ufffd":
        raw = raw[:-1]  # a character the cap cut (its bytes begun, not finished) is left out
    if case.stop:
        cut = min([raw.find(s) for s in case.stop if s in raw], default=-1)
        if cut >= 0:
            raw = raw[:cut]
    chk(comp.text == raw, f"completions text {comp.text!r}, expected {raw!r}")
    if not case.stop:
        chk(comp.tokens == chat.tokens, f"completions tokens {comp.tokens} vs chat {chat.tokens}")
        chk((comp.finish == "length") == (chat.finish == "length"), f"completions {comp.finish} vs chat {chat.finish}")
    if not case.tools:
        chk((gen.reasoning, gen.text, gen.finish, gen.tokens) == (oll.reasoning, oll.text, oll.finish, oll.tokens),
            f"generate vs ollama chat\n      gen={(gen.reasoning, gen.text, gen.finish, gen.tokens)}\n"
            f"      oll={(oll.reasoning, oll.text, oll.finish, oll.tokens)}")
    return bad


async def run_family(serve, root, fam, cases, tok):
    reps = 2 * len(PROTOS)
    b = ff.backend(fam, root, [c.output for c in cases for _ in range(reps)])
    s = await serve(backend=b)
    fails = []
    async with httpx.AsyncClient(timeout=60) as client:
        for case in cases:
            answers, errs = {}, []
            for p in PROTOS:
                pair = []
                for stream in (False, True):
                    path, bd = body(p, b.model_id, case, stream)
                    r = await client.post(s.url(path), json=bd, headers=AH if p == "messages" else {})
                    if r.status_code != 200:
                        errs.append(f"{p} stream={stream}: HTTP {r.status_code} {r.text[:300]}")
                        pair.append(None)
                        continue
                    try:
                        pair.append(FOLD[p][stream](r.text))
                    except Exception as exc:  # noqa: BLE001
                        errs.append(f"{p} stream={stream}: {type(exc).__name__}: {exc}"[:1500])
                        pair.append(None)
                answers[p] = pair
            if not errs:
                errs = compare(case, answers, tok)
            if errs:
                fails.append(f"[{fam}] {case}\n    " + "\n    ".join(errs))
    return fails


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("foldfuzz")


FAMS = [f for f in FAMILIES if not ONLY or f in ONLY.split(",")]


@pytest.mark.parametrize("fam", FAMS)
async def test_foldfuzz(serve, root, fam):
    tok, _ = ff.load(fam, root)
    rng = random.Random(f"{SEED}-{fam}")
    cases = [make_case(fam, n, rng, tok) for n in range(CASES)]
    fails = await run_family(serve, root, fam, cases, tok)
    assert not fails, f"{len(fails)} of {len(cases)}:\n" + "\n".join(fails)

"""Per family: scripted raw model outputs, tokenized with the family's fixture tokenizer and detokenized one
token at a time, parsed into exact TokenEvents; malformed markup comes back as text."""

from __future__ import annotations

import json
import logging

import pytest

import family_fixtures as ff
from tinytitan import events as ev
from family_cases import CASES, GEMMA_CALLS, WEATHER, run


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.mark.parametrize("family,case", [(f, i) for f, cases in CASES.items() for i in range(len(cases))])
def test_scripted_output(root, family, case, caplog):
    raw, expected = CASES[family][case]
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = run(root, family, raw)
    got = ff.summary(events)
    assert got == expected
    # every call's argument deltas add up to its final arguments, which are JSON
    for done in (e for e in events if isinstance(e, ev.ToolCallDone)):
        streamed = "".join(e.text for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == done.index)
        assert streamed == done.arguments
        json.loads(done.arguments)
    # markup that was returned as text was logged
    if any(m in raw for m in ("get_weather}", "<oops>", "{oops}", "get weather now", "print 'x'", "without a")):
        assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_name_before_arguments_and_arguments_stream(root):
    """ToolCallStarted goes out before the arguments are complete, and a long value arrives in pieces."""
    body = "line\n" * 40
    raw = ("<tool_call>\n<function=write_file>\n<parameter=path>\nnotes.txt\n</parameter>\n<parameter=content>\n"
           + body + "</parameter>\n</function>\n</tool_call>")
    events = run(root, "qwen3_coder", raw)
    kinds = [type(e).__name__ for e in events]
    first_args = kinds.index("ToolCallArgsDelta")
    assert kinds.index("ToolCallStarted") < first_args
    deltas = [e for e in events if isinstance(e, ev.ToolCallArgsDelta)]
    assert len(deltas) > 10
    done = next(e for e in events if isinstance(e, ev.ToolCallDone))
    assert json.loads(done.arguments) == {"path": "notes.txt", "content": body[:-1]}


@pytest.mark.parametrize("family,raw", [
    ("qwen", '<tool_call>\n{"name": "write_file", "arguments": {"path": "p", "content": "' + "x" * 200 + '"}}\n</tool_call>'),
    ("mistral", '[TOOL_CALLS]write_file[ARGS]{"path": "p", "content": "' + "x" * 200 + '"}'),
    ("glm", "<tool_call>write_file\n<arg_key>content</arg_key>\n<arg_value>" + "x" * 200 + "</arg_value>\n</tool_call>"),
    ("gpt_oss", '<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{"content": "'
     + "x" * 200 + '"}<|call|>'),
])
def test_arguments_stream_before_the_call_ends(root, family, raw):
    events = run(root, family, raw)
    deltas = [i for i, e in enumerate(events) if isinstance(e, ev.ToolCallArgsDelta)]
    started = next(i for i, e in enumerate(events) if isinstance(e, ev.ToolCallStarted))
    assert started < deltas[0] and len(deltas) > 3


def test_cut_short_call_is_closed_with_what_it_has(root):
    raw = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    events = run(root, "qwen", raw)
    got = ff.summary(events)
    assert got[0] == ("call", 0, "get_weather")
    assert got[-2] == ("done", 0, '{"city": "Par')
    assert got[-1] == ("finish", "tool_calls")


@pytest.mark.parametrize("family,opener", [("qwen", "<think>\n"), ("glm", "<think>"), ("mistral", "[THINK]")])
def test_prompt_that_opens_reasoning(root, family, opener):
    """A prompt ending with the reasoning opener (templates that force thinking) starts in reasoning."""
    from tinytitan.engine.families import detect

    tok, cfg = ff.load(family, root)
    fam = detect(tok, cfg)
    assert fam.starts_in_reasoning("<|im_start|>assistant\n" + opener)
    assert not fam.starts_in_reasoning("<|im_start|>assistant\n")
    closer = fam.markup.think_close
    p = fam.parser(True, {}, {})
    events = []
    for piece in ("thinking", " hard", closer, "\n\nAnswer."):
        events += p.feed(piece)[0]
    events += p.finish()
    assert ff.summary(events) == [("reasoning", "thinking hard"), ("text", "Answer.")]


def test_harmony_prompt_in_analysis():
    from tinytitan.engine.families import FAMILIES

    fam = FAMILIES["gpt_oss"]
    assert fam.starts_in_reasoning("<|start|>assistant<|channel|>analysis<|message|>")
    p = fam.parser(True)
    events = []
    for piece in ("Hmm", ".", "<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hi", "!"):
        events += p.feed(piece)[0]
    events += p.finish()
    assert ff.summary(events) == [("reasoning", "Hmm."), ("text", "Hi!")]


def test_reasoning_tokens_counted_by_channel(root):
    events = run(root, "gpt_oss", "<|channel|>analysis<|message|>Some careful thought here.<|end|><|start|>assistant"
                                  "<|channel|>final<|message|>Done.<|return|>")
    fin = events[-1]
    assert isinstance(fin, ev.Finished)
    assert 0 < fin.usage.reasoning_tokens < fin.usage.completion_tokens


@pytest.mark.parametrize("family,module,raw", GEMMA_CALLS)
@pytest.mark.parametrize("step", [1, 2, 5])
def test_gemma_call_formats(family, module, raw, step):
    import importlib

    from tinytitan.engine.families import FAMILIES

    mod = importlib.import_module(f"mlx_lm.tool_parsers.{module}")
    p = FAMILIES[family].parser(False, {}, {})
    events = []
    for i in range(0, len(raw), step):
        events += p.feed(raw[i:i + step])[0]
    events += p.finish()
    block = raw.split(mod.tool_call_start)[1].split(mod.tool_call_end)[0]
    theirs = mod.parse_tool_call(block)
    got = ff.summary(events)
    calls = [g for g in got if g[0] == "call"]
    done = [g for g in got if g[0] == "done"]
    assert [c[2] for c in calls] == [theirs["name"]]
    assert json.loads(done[0][2]) == theirs["arguments"]
    assert [g for g in got if g[0] == "args"][0][2] == done[0][2]
    before = raw.split(mod.tool_call_start)[0]
    if "<|channel>thought" in before:
        assert got[:2] == [("reasoning", "hmm"), ("text", "Hi")]
    elif before:
        assert got[0] == ("text", before)


def test_gemma_call_malformed_is_text():
    from tinytitan.engine.families import FAMILIES

    p = FAMILIES["gemma4"].parser()
    events = []
    for piece in ("<|tool_call>", "not a call", "<tool_call|>", " ok"):
        events += p.feed(piece)[0]
    events += p.finish()
    assert ff.summary(events) == [("text", "<|tool_call>not a call<tool_call|> ok")]


def test_gemma4_and_function_gemma_detected():
    from tinytitan.engine.families import detect

    class Tok:
        def __init__(self, template, vocab):
            self.chat_template, self._vocab = template, vocab

        def get_vocab(self):
            return self._vocab

    g4 = Tok("...{{ '<|tool_call>call:' + name }}...<tool_call|>...<|turn>model", {"<|tool_call>": 1, "<tool_call|>": 2,
                                                                                   "<|channel>": 3, "<channel|>": 4})
    assert detect(g4).name == "gemma4"
    fg = Tok("<start_of_turn>developer ... <start_function_call>", {"<start_function_call>": 1, "<start_of_turn>": 2})
    assert detect(fg).name == "function_gemma"


def _invariants(events):
    started = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    assert [s.index for s in started] == list(range(len(started)))
    assert [d.index for d in done] == [s.index for s in started]  # every call ends, once, in order
    for d in done:
        assert "".join(e.text for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == d.index) \
            == d.arguments
        started_at = next(i for i, e in enumerate(events) if isinstance(e, ev.ToolCallStarted) and e.index == d.index)
        assert all(i > started_at for i, e in enumerate(events)
                   if isinstance(e, ev.ToolCallArgsDelta) and e.index == d.index)


@pytest.mark.parametrize("family", list(CASES) + ["gemma4", "function_gemma"])
def test_any_cut_and_any_split_never_fails(family):
    """Every output cut short at every position, fed in random pieces: no exception, and the call events
    stay well formed (each call started once, ended once, its deltas adding up to its arguments)."""
    import random

    from tinytitan.engine.families import FAMILIES

    raws = [raw for raw, _ in CASES.get(family, [])] + [raw for f, _, raw in GEMMA_CALLS if f == family]
    rnd = random.Random(7)
    for raw in raws:
        for cut in range(len(raw) + 1):
            text = raw[:cut]
            p = FAMILIES[family].parser(False, {}, {"get_weather": WEATHER.parameters})
            events, i = [], 0
            while i < len(text):
                n = rnd.randint(1, 4)
                events += p.feed(text[i:i + n])[0]
                i += n
            events += p.finish()
            _invariants(events)


FUZZ_ATOMS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<function=", "<parameter=", "</parameter>",
              "</function>", ">", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "[TOOL_CALLS]", "[ARGS]",
              "[THINK]", "[/THINK]", "<|python_tag|>", "```tool_code", "```", "<|channel|>", "<|message|>", "<|end|>",
              "<|call|>", "<|start|>", "assistant", " to=functions.f", "analysis", "final", "commentary",
              "<|tool_call>", "<tool_call|>", "call:f{", '<|"|>', "<escape>", "<start_function_call>",
              "<end_function_call>", "<|channel>thought", "<channel|>", '{"name": "f", "arguments": ',
              '{"name": "g", "parameters": {', '"a": 1', "}", "{", "[", "]", ",", ":", '"', "\\", "x", " ", "\n",
              "get(a=1)", "k:", "true", "(", ")"]


def test_markup_soup_never_fails(caplog):
    """Random sequences of every family's markers and JSON fragments, in random pieces, into every parser."""
    import random

    from tinytitan.engine.families import FAMILIES

    rnd = random.Random(11)
    with caplog.at_level(logging.CRITICAL, logger="tinytitan.parser"):
        for _ in range(1500):
            fam = rnd.choice(sorted(FAMILIES))
            text = "".join(rnd.choice(FUZZ_ATOMS) for _ in range(rnd.randint(1, 25)))
            p = FAMILIES[fam].parser(rnd.random() < 0.2, {}, {"f": {"properties": {"a": {"type": "integer"}}}})
            events, i = [], 0
            while i < len(text):
                n = rnd.randint(1, 6)
                events += p.feed(text[i:i + n])[0]
                i += n
            events += p.finish()
            _invariants(events)


def test_harmony_header_cut_short_is_not_text():
    from tinytitan.engine.families import FAMILIES

    p = FAMILIES["gpt_oss"].parser()
    events = []
    for piece in ("<|channel|>", "final", "<|message|>", "Hi.", "<|end|>", "<|start|>", "assistant", "<|channel|>"):
        events += p.feed(piece)[0]
    events += p.finish()
    assert ff.summary(events) == [("text", "Hi.")]

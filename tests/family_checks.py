"""The checks every new model family goes through (its test module gives the family's own raw outputs):
detection and stop tokens on a tiny model of its architecture, names and arguments streaming, closers inside
string values, reasoning split and counted by channel, forced tool choice and strict tools masked in the
family's own markup (on the tiny model: the real MLX path), and history rendered through its own template."""

from __future__ import annotations

import json
import random

import jsonschema

import family_fixtures as ff
import family_models as fm  # noqa: F401 (the family test modules reach it as family_checks.fm)
from grammar_walk import random_document_from
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, Tool, ToolCall
from tinytitan.engine.decode.token_events import DecodeLoop
from tinytitan.engine.families import detect

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 9}},
           "required": ["city"], "additionalProperties": False}
WRITE = {"type": "object", "properties": {"path": {"type": "string", "maxLength": 12},
                                          "content": {"type": "string", "maxLength": 24}},
         "required": ["path", "content"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "write_file": WRITE}
TOOLS = tuple(Tool(n, f"{n} tool", s) for n, s in SCHEMAS.items())
USER = (Message("system", "You are helpful."), Message("user", "Weather in Paris, and save a note?"))


def events_of(backend, req) -> list:
    prepared = backend.prepare(req)
    out: list = []
    loop = DecodeLoop(backend.parser(prepared), req.stop, out.append)
    backend.decode(prepared, loop, lambda: False)
    return out


def calls_of(events) -> list[tuple[str, dict]]:
    names = {e.index: e.name for e in events if isinstance(e, ev.ToolCallStarted)}
    return [(names[e.index], json.loads(e.arguments)) for e in events if isinstance(e, ev.ToolCallDone) and e.complete]


def check_detected(family: str, root, model) -> None:
    tok, cfg = ff.load(family, root)
    assert detect(tok, cfg).name == family and detect(tok, None).name == family
    assert model.family.name == family
    vocab = model.tokenizer.get_vocab()
    assert {vocab[t] for t in model.family.stop_tokens if t in vocab} <= set(model.tokenizer.eos_token_ids)


def check_streaming(family: str, root, raw: str, expected: list[tuple[str, dict]], reasoning=None) -> list:
    """``raw`` scripted through the engine's path (rendered prompt, tokenized output, the family's parser):
    the calls, each name out before its arguments, the arguments in several deltas that add up."""
    events = ff.generate(ff.backend(family, root, [raw]), ChatRequest("m", USER, TOOLS, reasoning=reasoning))
    assert calls_of(events) == expected, events
    for done in (e for e in events if isinstance(e, ev.ToolCallDone)):
        started = next(i for i, e in enumerate(events) if isinstance(e, ev.ToolCallStarted) and e.index == done.index)
        deltas = [i for i, e in enumerate(events) if isinstance(e, ev.ToolCallArgsDelta) and e.index == done.index]
        assert deltas and started < deltas[0]
        assert "".join(events[i].text for i in deltas) == done.arguments
    assert events[-1].reason == "tool_calls"
    return events


def check_reasoning(family: str, root, raw: str, thought: str, text: str) -> None:
    """A prompt that opens the thought: reasoning, then text, then the call; reasoning tokens are the
    generated tokens that landed in the reasoning channel."""
    b = ff.backend(family, root, [raw])
    req = ChatRequest("m", USER, TOOLS, reasoning=True)
    assert b.family.starts_in_reasoning(b.prepare(req).prompt_text)
    events = ff.generate(b, req)
    assert "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta)) == thought
    assert "".join(e.text for e in events if isinstance(e, ev.TextDelta)) == text
    usage = events[-1].usage
    hf = b.tokenizer
    thought_tokens = len(hf.encode(thought, add_special_tokens=False))
    assert 0 < usage.reasoning_tokens < usage.completion_tokens
    assert abs(usage.reasoning_tokens - thought_tokens) <= 2  # the thought's tokens, plus its closing marker


def check_forced_on_model(model, opening: str, parallel: bool, thought_open: bool = False,
                          max_tokens: int = 150) -> None:
    """tool_choice required on the tiny model: every sampled answer is a call in the family's markup to an
    allowed tool, its arguments valid; no reasoning tokens (a forced call decodes with reasoning off). With
    parallel calls a random-weight model may go on calling until the cap: the calls it finished are checked.
    ``thought_open``: the template always opens a thought, which the grammar closes at once (one token)."""
    seen = set()
    samplings = ({"temperature": 1.0, "seed": 1},) if parallel else ({"temperature": 0.0}, {"temperature": 1.0, "seed": 2})
    for sampling in samplings:
        req = ChatRequest("m", USER, TOOLS, tool_choice="required", parallel_tool_calls=parallel, max_tokens=max_tokens,
                          **sampling)
        events = events_of(model, req)
        fin = events[-1]
        calls = calls_of(events)
        assert fin.reason == "tool_calls" or (parallel and fin.reason == "length"), events[-3:]
        assert calls and (parallel or len(calls) == 1)
        for name, args in calls:
            jsonschema.validate(args, SCHEMAS[name])
            seen.add(name)
        assert fin.usage.reasoning_tokens == (1 if thought_open else 0)
        assert not [e for e in events if isinstance(e, (ev.ReasoningDelta, ev.TextDelta)) and e.text.strip()]
    assert seen


def check_strict_under_auto(family: str, root, opened: str) -> None:
    """tool_choice auto with a strict tool: text is free, and a call the model opens (``opened``, its markup
    up to the tool's name) is held to the strict tool's schema."""
    tools = (Tool("get_weather", parameters=WEATHER, strict=True), Tool("write_file", parameters=WRITE))
    b = ff.backend(family, root)
    req = ChatRequest("m", USER, tools, reasoning=False, parallel_tool_calls=False)
    compiled = b.prepare(req).grammar
    assert compiled is not None
    hf = b.tokenizer
    prefix = list(hf.encode("Let me see." + opened, add_special_tokens=False))
    rng = random.Random(family)
    for _ in range(8):
        matcher = compiled.matcher()
        assert matcher.consume_tokens(prefix), matcher.get_error()
        walked = random_document_from(compiled, matcher, rng, set(b.tokenizer.eos_token_ids), stop=1.0)
        raw = hf.decode(prefix + walked, skip_special_tokens=False)
        calls = calls_of(ff.generate(ff.backend(family, root, [raw]), req))
        assert calls and calls[0][0] == "get_weather", raw
        jsonschema.validate(calls[0][1], WEATHER)


HISTORY_CALLS = (ToolCall("call_a1", "get_weather", '{"city": "Paris", "days": 3}'),
                 ToolCall("call_b2", "write_file", '{"path": "a.md", "content": "# Note\\nline two"}'))
HISTORY = USER + (Message("assistant", "Let me check.", tool_calls=HISTORY_CALLS),
                  Message("tool", "sunny, 21C", tool_call_id="call_a1", name="get_weather"),
                  Message("tool", "written", tool_call_id="call_b2", name="write_file"),
                  Message("user", "Thanks. And tomorrow?"))


def check_history(family: str, root, rendered: list[str]) -> str:
    """A conversation with calls and their results, rendered by the family's own template: the calls are in
    the prompt as the model writes them (``rendered``: the pieces the prompt must hold), results too."""
    text = ff.backend(family, root).prepare(ChatRequest("m", HISTORY, TOOLS, reasoning=False)).prompt_text
    for piece in rendered + ["sunny, 21C", "written", "Thanks. And tomorrow?"]:
        assert piece in text, (piece, text)
    return text

"""Each protocol's request body for a fuzz case, and each protocol's answer folded (streamed as the SDKs' own
accumulators fold it, or not) into what it told (Told): text, reasoning, calls, the finish. AH: the Anthropic
headers; told_everywhere: one raw output asked on every protocol that takes tools."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from output_fuzz_cases import Case
from sse import parse_sse
from tinytitan.protocols.common import RUN_BREAK  # (a case of the same fields; its tool_choice stays None here)


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "q": {"type": "string"}}}
FN = {"name": "f", "description": "d", "parameters": SCHEMA}
AH = {"anthropic-version": "2023-06-01", "x-api-key": "x"}
PROTOS = ("chat", "completions", "responses", "messages", "ollama", "generate")


def body(proto, model, case: Case, stream: bool):
    msgs = [{"role": "user", "content": "hi"}]
    if proto == "chat":
        b = {"model": model, "messages": msgs, "stream": stream}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if case.cap:
            b["max_tokens"] = case.cap
        if case.stop:
            b["stop"] = case.stop
        if case.tools:
            b["tools"] = [{"type": "function", "function": FN}]
        return "/v1/chat/completions", b
    if proto == "completions":
        b = {"model": model, "prompt": "hi", "stream": stream, "max_tokens": case.cap or 4096}
        if stream:
            b["stream_options"] = {"include_usage": True}
        if case.stop:
            b["stop"] = case.stop
        return "/v1/completions", b
    if proto == "responses":
        b = {"model": model, "input": "hi", "stream": stream, "store": False}
        if case.cap:
            b["max_output_tokens"] = case.cap
        if case.tools:
            b["tools"] = [{"type": "function", **FN}]
        return "/v1/responses", b
    if proto == "messages":
        b = {"model": model, "messages": msgs, "stream": stream, "max_tokens": case.cap or 4096}
        if case.stop:
            b["stop_sequences"] = case.stop
        if case.tools:
            b["tools"] = [{"name": "f", "description": "d", "input_schema": SCHEMA}]
        return "/v1/messages", b
    opts = {"num_predict": case.cap or -1}
    if case.stop:
        opts["stop"] = case.stop
    if proto == "ollama":
        b = {"model": model, "messages": msgs, "stream": stream, "options": opts}
        if case.tools:
            b["tools"] = [{"type": "function", "function": FN}]
        return "/api/chat", b
    return "/api/generate", {"model": model, "prompt": "hi", "stream": stream, "options": opts}


@dataclass
class Told:
    reasoning: str = ""
    text: str = ""
    calls: list = field(default_factory=list)  # (name, arguments as sent)
    finish: object = None
    tokens: int | None = None
    stop_sequence: object = None
    ids: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def key(self):
        return (self.reasoning, self.text, self.calls, self.finish, self.tokens, self.stop_sequence)


def fold_chat_ns(d):
    from openai.types.chat import ChatCompletion

    c = ChatCompletion.model_validate(json.loads(d))
    m = c.choices[0].message
    return Told((m.model_extra or {}).get("reasoning_content") or "", m.content or "",
                [(t.function.name, t.function.arguments) for t in m.tool_calls or []], c.choices[0].finish_reason,
                c.usage.completion_tokens, None, [t.id for t in m.tool_calls or []],
                {"reasoning_tokens": c.usage.completion_tokens_details.reasoning_tokens})


def fold_chat_s(text):
    from openai.lib.streaming.chat._completions import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    st = ChatCompletionStreamState()
    ev = parse_sse(text)
    assert ev[-1][1] == "[DONE]", ev[-1]
    for _, d in ev[:-1]:
        st.handle_chunk(ChatCompletionChunk.model_validate(d))
    c = st.current_completion_snapshot  # get_final_completion raises on finish_reason length
    m = c.choices[0].message
    return Told((m.model_extra or {}).get("reasoning_content") or "", m.content or "",
                [(t.function.name, t.function.arguments) for t in m.tool_calls or []], c.choices[0].finish_reason,
                c.usage.completion_tokens if c.usage else None, None, [t.id for t in m.tool_calls or []],
                {"reasoning_tokens": c.usage.completion_tokens_details.reasoning_tokens if c.usage else None})


def fold_completions_ns(d):
    from openai.types import Completion

    c = Completion.model_validate(json.loads(d))
    return Told("", c.choices[0].text, [], c.choices[0].finish_reason, c.usage.completion_tokens)


def fold_completions_s(text):
    from openai._models import construct_type
    from openai.types import Completion

    ev = parse_sse(text)
    assert ev[-1][1] == "[DONE]", ev[-1]
    t = Told()
    for _, d in ev[:-1]:
        c = construct_type(type_=Completion, value=d)  # as the SDK builds stream chunks
        for ch in c.choices:
            t.text += ch.text
            if ch.finish_reason:
                assert t.finish is None, "two finish reasons"
                t.finish = ch.finish_reason
        if c.usage:
            t.tokens = c.usage.completion_tokens
    return t


def _resp_told(r):
    t = Told(finish=r.status, tokens=r.usage.output_tokens if r.usage else None)
    t.extra["reasoning_tokens"] = r.usage.output_tokens_details.reasoning_tokens if r.usage else None
    called = False  # the text runs as Chat's one string joins them (protocols.common.TextRuns)
    for item in r.output:
        if item.type == "reasoning":
            t.reasoning += "".join(c.text for c in item.content or [])
        elif item.type == "message":
            t.text += (RUN_BREAK if t.text and called else "") + "".join(c.text for c in item.content)
            called = False
        elif item.type == "function_call":
            called = True
            t.calls.append((item.name, item.arguments, item.status))
            t.ids.append((item.id, item.call_id))
    t.extra["incomplete"] = r.incomplete_details and r.incomplete_details.reason
    return t


def fold_responses_ns(d):
    from openai.types.responses import Response

    return _resp_told(Response.model_validate(json.loads(d)))


def fold_responses_s(text):
    from pydantic import TypeAdapter
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import ResponseStreamEvent
    from openai import omit

    ad = TypeAdapter(ResponseStreamEvent)
    st = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    deltas: dict = {}
    for name, d in parse_sse(text):
        e = ad.validate_python(d)
        st.handle_event(e)
        if e.type in ("response.output_text.delta", "response.reasoning_text.delta",
                      "response.function_call_arguments.delta"):
            deltas[e.output_index] = deltas.get(e.output_index, "") + e.delta
        if e.type in ("response.completed", "response.incomplete", "response.failed"):
            final = e.response
    assert final is not None
    t = _resp_told(final)
    # the deltas must rebuild every item's text / arguments
    for k, item in enumerate(final.output):
        got = deltas.get(k, "")
        want = (item.arguments if item.type == "function_call" else
                "".join(c.text for c in (item.content or [])))
        assert got == want, f"responses: deltas of item {k} {got!r} vs final {want!r}"
    return t


def _msg_told(m):
    t = Told(finish=m.stop_reason, tokens=m.usage.output_tokens, stop_sequence=m.stop_sequence)
    called = False  # the text runs as Chat's one string joins them (protocols.common.TextRuns)
    for b in m.content:
        if b.type == "thinking":
            t.reasoning += b.thinking
        elif b.type == "text":
            t.text += (RUN_BREAK if t.text and called else "") + b.text
            called = False
        elif b.type == "tool_use":
            called = True
            t.calls.append((b.name, b.input))
            t.ids.append(b.id)
    return t


def fold_messages_ns(d):
    from anthropic.types import Message

    return _msg_told(Message.model_validate(json.loads(d)))


def fold_messages_s(text):
    from pydantic import TypeAdapter
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent

    ad = TypeAdapter(RawMessageStreamEvent)
    snap, bufs = None, {}
    for name, d in parse_sse(text):
        if name == "ping":
            continue
        snap = accumulate_event(event=ad.validate_python(d), current_snapshot=snap, json_bufs=bufs)
    return _msg_told(snap)


def _oll(parts, end, chat):
    t = Told(finish=end.done_reason, tokens=end.eval_count)
    for p in parts:
        if chat:
            t.reasoning += p.message.thinking or ""
            t.text += p.message.content or ""
            for c in p.message.tool_calls or []:
                t.calls.append((c.function.name, dict(c.function.arguments)))
        else:
            t.reasoning += p.thinking or ""
            t.text += p.response or ""
    return t


def fold_ollama(text, stream, chat):
    import ollama

    model = ollama.ChatResponse if chat else ollama.GenerateResponse
    if not stream:
        r = model.model_validate(json.loads(text))
        assert r.done
        return _oll([r], r, chat)
    lines = [model.model_validate(json.loads(x)) for x in text.splitlines() if x.strip()]
    assert [x.done for x in lines] == [False] * (len(lines) - 1) + [True], "ollama: done only last"
    return _oll(lines, lines[-1], chat)


FOLD = {
    "chat": (fold_chat_ns, fold_chat_s), "completions": (fold_completions_ns, fold_completions_s),
    "responses": (fold_responses_ns, fold_responses_s), "messages": (fold_messages_ns, fold_messages_s),
    "ollama": (lambda t: fold_ollama(t, False, True), lambda t: fold_ollama(t, True, True)),
    "generate": (lambda t: fold_ollama(t, False, False), lambda t: fold_ollama(t, True, False)),
}
TOOL_PROTOCOLS = ("chat", "responses", "messages", "ollama")


async def told_everywhere(client, s, model_id: str, raw: str, name: str, schema: dict):
    """Each protocol that takes tools, streamed and not, asked with one tool (``name``, ``schema``) while the
    backend answers ``raw`` (script it once per ask): yields (protocol, stream, the answer's fold)."""
    for proto in TOOL_PROTOCOLS:
        for stream in (False, True):
            path, request = body(proto, model_id, Case(0, raw, True, None, []), stream)
            tool = request["tools"][0]
            if proto == "messages":
                tool.update(name=name, input_schema=schema)
            elif proto == "responses":
                tool.update(name=name, parameters=schema)
            else:
                tool["function"] = dict(tool["function"], name=name, parameters=schema)
            r = await client.post(s.url(path), json=request, headers=AH if proto == "messages" else {})
            assert r.status_code == 200, r.text
            yield proto, stream, FOLD[proto][stream](r.text)

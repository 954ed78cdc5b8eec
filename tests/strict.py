"""Strict conformance: every body and event a test reads is checked against the official SDKs' pydantic models.

The SDK clients build their objects leniently (``construct``: a missing required field becomes an absent
attribute, an unknown one is kept), so a test that reads a reply through a client cannot see a field the API
requires but the server left out. Here the same models validate:

- with ``strict=True``: no coercion (``"1"`` is not an int, ``1`` is not a bool, a str is not an enum member);
- required fields must be present (pydantic's ``model_validate`` refuses a missing one, which ``construct``
  does not), e.g. ``usage.input_tokens_details.cache_write_tokens`` on a Responses object;
- no field the model does not define, at any depth: the SDK models allow extras (``extra="allow"``) so an
  unknown field lands in ``__pydantic_extra__``; we walk the validated tree and refuse any. A misspelt field
  would otherwise pass silently.

Each function returns the validated SDK object (so a test can read typed attributes) and raises
``AssertionError`` naming the offending field. ``body(protocol, data)`` / ``event(protocol, data)`` pick the
model from the object's own ``object``/``type`` field; the named helpers check one kind.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import pydantic
from pydantic import TypeAdapter

__all__ = [
    "chat_completion", "chat_chunk", "completion", "response", "compacted_response", "input_token_count", "response_event", "response_item_list",
    "response_deleted", "message", "message_event", "tokens_count", "openai_error", "anthropic_error",
    "openai_model", "openai_model_list", "anthropic_model", "anthropic_model_list", "body", "event", "sse_events", "StrictError",
]


class StrictError(AssertionError):
    pass


def _extras(value: Any, path: str = "$") -> list[str]:
    """Paths of every field a validated SDK object holds that its model does not define."""
    found: list[str] = []
    if isinstance(value, pydantic.BaseModel):
        for name in (value.__pydantic_extra__ or {}):
            found.append(f"{path}.{name}")
        for name in type(value).model_fields:
            found += _extras(getattr(value, name, None), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += _extras(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, item in value.items():
            found += _extras(item, f"{path}.{k}")
    return found


def _validate(adapter: TypeAdapter, data: Any, what: str, allow_extra: tuple[str, ...] = ()) -> Any:
    if isinstance(data, (bytes, str)):
        data = json.loads(data)
    try:  # JSON mode: strict about types, yet a datetime is the ISO string JSON can carry
        obj = adapter.validate_json(json.dumps(data), strict=True)
    except pydantic.ValidationError as exc:
        raise StrictError(f"{what} does not validate strictly:\n{exc}\n{json.dumps(data)[:2000]}") from None
    extra = [p for p in _extras(obj) if not any(re.fullmatch(a, p) for a in allow_extra)]
    if extra:
        raise StrictError(f"{what} carries fields the SDK does not define: {extra}\n{json.dumps(data)[:2000]}")
    return obj


@lru_cache(maxsize=None)
def _adapter(kind: str) -> TypeAdapter:
    """One TypeAdapter per model, built on first use (building them all costs about a second)."""
    if kind == "chat_completion":
        from openai.types.chat import ChatCompletion as t
    elif kind == "completion":
        from openai.types import Completion as t
    elif kind == "chat_chunk":
        from openai.types.chat import ChatCompletionChunk as t
    elif kind == "response":
        from openai.types.responses import Response as t
    elif kind == "compacted_response":
        from openai.types.responses.compacted_response import CompactedResponse as t
    elif kind == "input_token_count":
        from openai.types.responses import InputTokenCountResponse as t
    elif kind == "response_event":
        from openai.types.responses import ResponseStreamEvent as t
    elif kind == "input_message_item":
        from openai.types.responses import ResponseInputMessageItem as t
    elif kind == "response_item_list":
        from openai.types.responses import ResponseItemList as t
    elif kind == "openai_error":
        from openai.types import ErrorObject as t
    elif kind == "openai_model":
        from openai.types import Model as t
    elif kind == "message":
        from anthropic.types import Message as t
    elif kind == "message_event":
        from anthropic.types import RawMessageStreamEvent as t
    elif kind == "beta_message":
        from anthropic.types.beta import BetaMessage as t
    elif kind == "beta_message_event":
        from anthropic.types.beta import BetaRawMessageStreamEvent as t
    elif kind == "tokens_count":
        from anthropic.types import MessageTokensCount as t
    elif kind == "beta_tokens_count":
        from anthropic.types.beta import BetaMessageTokensCount as t
    elif kind == "anthropic_error":
        from anthropic.types import ErrorResponse as t
    elif kind == "anthropic_error_details":
        from anthropic.types.shared import ErrorDetails as t
    elif kind == "anthropic_model":
        from anthropic.types import ModelInfo as t
    else:
        raise KeyError(kind)
    return TypeAdapter(t)


def chat_completion(data):
    return _validate(_adapter("chat_completion"), data, "chat.completion", CHAT_EXTENSIONS)


def _echoed_first(data):
    """With ``echo``, the prompt's first token has no log probability: OpenAI and vLLM send ``null`` as its
    ``token_logprobs`` and ``top_logprobs`` entries, which the SDK's model (lists of floats and of dicts) does not
    say. That first entry alone, and both null together, is checked here and left out of the SDK's check."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return data
    choices = []
    for c in data["choices"]:
        lp = c.get("logprobs") if isinstance(c, dict) else None
        if isinstance(lp, dict) and lp.get("token_logprobs") and lp["token_logprobs"][0] is None:
            if not lp.get("top_logprobs") or lp["top_logprobs"][0] is not None:
                raise StrictError(f"a null first token_logprobs entry without a null top_logprobs one: {lp}")
            lp = {**lp, "token_logprobs": [0.0, *lp["token_logprobs"][1:]],
                  "top_logprobs": [{}, *lp["top_logprobs"][1:]]}
            c = {**c, "logprobs": lp}
        choices.append(c)
    return {**data, "choices": choices}


def completion(data):
    """A legacy completion, whole."""
    return _validate(_adapter("completion"), _echoed_first(data), "text_completion")


def completion_chunk(data):
    """One streamed legacy completion: the SDK reads it with the same model as a whole one, whose choices
    require a finish reason, but every chunk before the last carries ``finish_reason: null`` (as OpenAI's do)."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if isinstance(data, dict) and isinstance(data.get("choices"), list):
        data = {**data, "choices": [{**c, "finish_reason": c.get("finish_reason") or "stop"}
                                    if isinstance(c, dict) and c.get("finish_reason", "x") is None else c
                                    for c in data["choices"]]}
    return _validate(_adapter("completion"), _echoed_first(data), "text_completion chunk")


def _custom_call_deltas(data):
    """The SDK's chunk delta knows function tool calls only; a custom tool call (``type: custom``, as the
    SDK's whole message has it) is checked for that shape here and left out of the SDK's check."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return data
    choices = []
    for c in data["choices"]:
        calls = ((c.get("delta") or {}).get("tool_calls") if isinstance(c, dict) else None) or []
        custom = [t for t in calls if isinstance(t, dict) and (t.get("type") == "custom" or "custom" in t)]
        for t in custom:
            inner = t.get("custom")
            ok = (set(t) <= {"index", "id", "type", "custom"} and isinstance(t.get("index"), int)
                  and t.get("type", "custom") == "custom"
                  and isinstance(t.get("id", ""), str) and isinstance(inner, dict)
                  and set(inner) <= {"name", "input"} and all(isinstance(v, str) for v in inner.values()))
            if not ok:
                raise StrictError(f"not a custom tool call delta: {t}")
        if custom:
            c = {**c, "delta": {**c["delta"], "tool_calls": [t for t in calls if t not in custom] or None}}
        choices.append(c)
    return {**data, "choices": choices}


def chat_chunk(data):
    return _validate(_adapter("chat_chunk"), _custom_call_deltas(data), "chat.completion.chunk", CHAT_EXTENSIONS)


_ITEM_STATUSES = ("in_progress", "completed", "incomplete")


def _custom_call_status(data):
    """A custom_tool_call item's ``status`` (as the API and Codex's own types have it; the SDK's model has
    no field for it): checked to be an item status, then left out of the SDK's check."""
    if isinstance(data, list):
        return [_custom_call_status(v) for v in data]
    if not isinstance(data, dict):
        return data
    if data.get("type") == "custom_tool_call" and "status" in data:
        if data["status"] not in _ITEM_STATUSES:
            raise StrictError(f"custom_tool_call status {data['status']!r} is not one of {_ITEM_STATUSES}")
        data = {k: v for k, v in data.items() if k != "status"}
    return {k: _custom_call_status(v) for k, v in data.items()}


def response(data):
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    return _validate(_adapter("response"), _custom_call_status(data), "response", RESPONSE_ECHOES)


def input_token_count(data):
    return _validate(_adapter("input_token_count"), data, "responses.input_tokens answer")


def compacted_response(data):
    """The API keeps the input's messages (user, developer, system) in a compaction's output, ahead of the
    compaction item, but the SDK types ``output`` as output items only (an assistant message): those input
    messages are validated as the input message items they are, the rest as the SDK says."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    kept = [i for i in data.get("output") or [] if isinstance(i, dict) and i.get("type") == "message"
            and i.get("role") in ("user", "developer", "system")]
    for item in kept:
        _validate(_adapter("input_message_item"), item, "compaction output message")
    rest = {**data, "output": [i for i in data.get("output") or [] if not any(i is k for k in kept)]}
    _validate(_adapter("compacted_response"), rest, "response.compaction")
    return data


# the API names the function on response.function_call_arguments.done; this SDK's model has no field for it
ARGS_DONE_ECHOES = (r"\$\.name",)


def response_event(data):
    echoes = RESPONSE_ECHOES + (ARGS_DONE_ECHOES if _type(data) == "response.function_call_arguments.done" else ())
    return _validate(_adapter("response_event"), _custom_call_status(data), f"Responses event {_type(data)}", echoes)


def response_item_list(data):
    return _validate(_adapter("response_item_list"), data, "input_items list", ITEM_LIST_ECHOES)


def response_deleted(data):
    """The SDK's ``responses.delete`` returns nothing, so there is no model: the shape OpenAI sends."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if set(data) != {"id", "object", "deleted"} or data["object"] != "response" or data["deleted"] is not True \
            or not isinstance(data["id"], str):
        raise StrictError(f"not a response-deleted object: {data}")
    return data


def message(data):
    """A message; one answering ``context_management`` (a beta) is the SDK's beta message."""
    if isinstance(data, dict) and "context_management" in data:
        return _validate(_adapter("beta_message"), data, "message (context-management beta)")
    return _validate(_adapter("message"), data, "message")


def message_event(data):
    if isinstance(data, dict) and "context_management" in data:
        return _validate(_adapter("beta_message_event"), data, f"Messages event {_type(data)} (beta)")
    return _validate(_adapter("message_event"), data, f"Messages event {_type(data)}")


def tokens_count(data):
    if isinstance(data, dict) and "context_management" in data:
        return _validate(_adapter("beta_tokens_count"), data, "count_tokens answer (context-management beta)")
    return _validate(_adapter("tokens_count"), data, "count_tokens answer")


# tinytitan's own additions to an OpenAI model entry (documented in the README), nothing else
MODEL_EXTENSIONS = (r"\$\.context_window", r"\$\.max_output_tokens", r"\$\.input_modalities", r"\$\.loaded", r"\$\.device",
                    r"\$\.capabilities", r"\$\.parameters", r"\$\.quantization", r"\$\.size_bytes", r"\$\.digest")
# the reasoning text on Chat Completions, as DeepSeek, vLLM and llama.cpp send it (the SDK has no field for it)
CHAT_EXTENSIONS = (r"\$\.choices\[\d+\]\.(message|delta)\.reasoning_content",)
# request settings the Responses API echoes in its object but the SDK's Response model has no field for
RESPONSE_ECHOES = tuple(rf"\$(\.response)?\.{f}" for f in ("store", "presence_penalty", "frequency_penalty"))
# the page settings an input_items list echoes
ITEM_LIST_ECHOES = (r"\$\.limit", r"\$\.order")


def openai_model(data):
    return _validate(_adapter("openai_model"), data, "model", allow_extra=MODEL_EXTENSIONS)


def openai_model_list(data):
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if data.get("object") != "list" or not isinstance(data.get("data"), list):
        raise StrictError(f"not a model list: {data}")
    return [openai_model(m) for m in data["data"]]


def anthropic_model(data):
    return _validate(_adapter("anthropic_model"), data, "model info")


def anthropic_model_list(data):
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if set(data) != {"data", "has_more", "first_id", "last_id"} or not isinstance(data["data"], list) \
            or not isinstance(data["has_more"], bool):
        raise StrictError(f"not an Anthropic model list: {data}")
    return [anthropic_model(m) for m in data["data"]]


def openai_error(data):
    """OpenAI's envelope: exactly ``{"error": ErrorObject}`` (the SDK reads ``body["error"]``)."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if not isinstance(data, dict) or set(data) != {"error"}:
        raise StrictError(f"not an OpenAI error envelope: {data}")
    return _validate(_adapter("openai_error"), data["error"], "OpenAI error")


def anthropic_error(data):
    # the API documents 413 ``request_too_large``, which the SDK's error types leave out: held to the same shape
    if isinstance(data, dict) and isinstance(data.get("error"), dict) and data["error"].get("type") == "request_too_large":
        if not {"type", "error"} <= set(data) <= {"type", "error", "request_id"} or data["type"] != "error" \
                or set(data["error"]) != {"type", "message"} or not isinstance(data["error"]["message"], str) \
                or not isinstance(data.get("request_id", ""), str):
            raise StrictError(f"not an Anthropic error envelope: {data}")
        return data
    if isinstance(data, (bytes, str)):
        data = json.loads(data)
    details = data.get("error", {}).get("details") if isinstance(data, dict) and isinstance(data.get("error"), dict) else None
    if details is not None:  # the SDK reads `error.details` from the body (its ErrorDetails union, by error_code)
        _validate(_adapter("anthropic_error_details"), details, "Anthropic error details")
    return _validate(_adapter("anthropic_error"), data, "Anthropic error",
                     (r"\$\.error\.details",) if details is not None else ())


def _type(data) -> str:
    return data.get("type", "?") if isinstance(data, dict) else "?"


_BODIES = {"chat.completion": chat_completion, "text_completion": completion, "response": response, "response.compaction": compacted_response,
           "message": message, "message_tokens_count": tokens_count}


def body(data):
    """Any JSON body the server sends, by its own kind: an error envelope, a Chat completion, a Responses
    object, a compaction, an Anthropic message, a token count, a model or model list."""
    data = json.loads(data) if isinstance(data, (bytes, str)) else data
    if isinstance(data, dict):
        if "error" in data and data.get("type") == "error":
            return anthropic_error(data)
        if set(data) == {"error"}:
            return openai_error(data)
        if data.get("object") in _BODIES:
            if data["object"] == "response" and "deleted" in data:
                return response_deleted(data)
            return _BODIES[data["object"]](data)
        if data.get("type") == "message":
            return message(data)
        if set(data) == {"input_tokens"}:
            return tokens_count(data)
        if data.get("object") == "list" and data.get("data") and data["data"][0].get("object") == "model":
            return openai_model_list(data)
        if data.get("object") == "list" and "first_id" in data:
            return response_item_list(data)
    raise StrictError(f"no SDK model known for this body: {str(data)[:500]}")


def event(protocol: str, data):
    """One streamed event: protocol is "chat", "completions", "responses" or "messages"; ``[DONE]`` passes."""
    if protocol == "chat":
        if data == "[DONE]":
            return data
        if isinstance(data, dict) and "error" in data:  # a failure after the headers, as OpenAI sends it
            return openai_error(data)
        return chat_chunk(data)
    if protocol == "completions":
        if data == "[DONE]":
            return data
        if isinstance(data, dict) and "error" in data:
            return openai_error(data)
        return completion_chunk(data)
    if protocol == "responses":
        if isinstance(data, dict) and data.get("type") == "error":
            return _validate(_adapter("response_event"), data, "Responses error event")
        return response_event(data)
    if protocol == "messages":
        if isinstance(data, dict) and data.get("type") == "error":
            return anthropic_error(data)
        if data == {"type": "ping"}:  # a keep-alive Anthropic sends; the SDK skips it, so it has no model
            return data
        return message_event(data)
    raise KeyError(protocol)


def sse_events(protocol: str, events):
    """Validate every (name, data) pair of a parsed stream; the SSE ``event:`` name, when present, must equal
    the payload's type (Responses and Messages name every event). Returns the events unchanged."""
    for name, data in events:
        event(protocol, data)
        if name is not None and isinstance(data, dict) and data.get("type") and protocol != "chat":
            if name != data["type"]:
                raise StrictError(f"event name {name!r} differs from its type {data['type']!r}")
    return events


# -- every reply of an in-process server, checked on its way out -------------------------------------------------
def _route(method: str, path: str, anthropic_header: bool):
    """(protocol for SSE, checker for a 2xx JSON body, error envelope) for one request; None where the route
    has no SDK model (health, root, unload)."""
    parts = path.rstrip("/").split("/")
    if path.startswith("/v1/chat/completions"):
        return "chat", chat_completion, openai_error
    if path.startswith("/v1/completions"):
        return "completions", completion, openai_error
    if path.startswith("/v1/messages"):
        return "messages", (tokens_count if path.endswith("/count_tokens") else message), anthropic_error
    if path.startswith("/v1/responses"):
        if path == "/v1/responses/compact":
            check = compacted_response
        elif path == "/v1/responses/input_tokens" and method == "POST":
            check = input_token_count
        elif method == "DELETE":
            check = response_deleted
        elif parts[-1] == "input_items":
            check = response_item_list
        else:
            check = response
        return "responses", check, openai_error
    errors = anthropic_error if anthropic_header else openai_error
    if path == "/v1/models":
        return None, (anthropic_model_list if anthropic_header else openai_model_list), errors
    if method == "GET" and path.startswith("/v1/models/"):
        return None, (anthropic_model if anthropic_header else openai_model), errors
    return None, None, errors


def complete_sse_blocks(text: str) -> str:
    """The whole blocks of a stream (one cut short by a hang-up loses its tail, which is not checked)."""
    return text[: text.rfind("\n\n") + 2] if "\n\n" in text else ""


def without_tools(data):
    if isinstance(data, dict):
        if data.get("object") == "response":
            return {**data, "tools": []}
        if isinstance(data.get("response"), dict):
            return {**data, "response": without_tools(data["response"])}
    return data


def check_reply(method: str, path: str, anthropic_header: bool, status: int, content_type: str,
                raw: bytes, tools_echo: bool = True) -> None:
    """Validate one whole reply the server sent, by its route, status and content type. ``tools_echo=False``
    leaves out a Responses object's ``tools``, the request's tools echoed as sent (for a test that sends
    malformed tools the request validation does not yet refuse)."""
    from sse import parse_sse

    if path.startswith("/api/"):
        return check_ollama_reply(method, path, status, content_type, raw)
    if not path.startswith("/v1/"):
        return  # health, the root, Ollama's version: no official SDK model to hold them to
    protocol, check, errors = _route(method, path, anthropic_header)
    if method == "HEAD" or not raw:
        return
    if content_type.startswith("text/event-stream"):
        if protocol is None:
            raise StrictError(f"an event stream on {path}, which has no stream")
        events = parse_sse(complete_sse_blocks(raw.decode("utf-8")))
        sse_events(protocol, events if tools_echo else [(n, without_tools(d)) for n, d in events])
        return
    if not content_type.startswith("application/json"):
        raise StrictError(f"{method} {path} answered {status} with {content_type!r}, not JSON: {raw[:200]!r}")
    data = json.loads(raw)
    if status >= 400:
        errors(data)
    elif check is not None:
        check(data if tools_echo else without_tools(data))


# -- Ollama: the official ``ollama`` client's pydantic models -------------------------------------------------
OLLAMA_MODELS = {"/api/chat": "ChatResponse", "/api/generate": "GenerateResponse", "/api/tags": "ListResponse",
                 "/api/show": "ShowResponse", "/api/ps": "ProcessResponse"}
# Fields Ollama's server sends that the Python client's models leave out: a tool call's function.index and a
# listed model's name (its api/types.go: ToolCallFunction.Index, ListModelResponse / ProcessModelResponse.Name),
# the call id newer servers add, a shown model's default system prompt (ShowResponse.System), and a token's bytes
# (TokenLogprob.Bytes, its alternatives' too).
OLLAMA_EXTENSIONS = (r"\$\.message\.tool_calls\[\d+\]\.id", r"\$\.message\.tool_calls\[\d+\]\.function\.index",
                     r"\$\.models\[\d+\]\.name", r"\$\.system", r"\$\.logprobs\[\d+\](\.top_logprobs\[\d+\])?\.bytes")


def _ollama_unknown(obj: Any, data: Any, path: str = "$") -> list[str]:
    """Fields of ``data`` that the validated ``ollama`` model ``obj`` does not define (its models drop unknown
    fields silently: ``extra="ignore"``), at any depth."""
    found: list[str] = []
    if isinstance(obj, pydantic.BaseModel) and isinstance(data, dict):
        fields = type(obj).model_fields
        names = {f.alias or n: n for n, f in fields.items()}
        for key, value in data.items():
            if key not in names:
                found.append(f"{path}.{key}")
            else:
                found += _ollama_unknown(getattr(obj, names[key], None), value, f"{path}.{key}")
    elif isinstance(obj, (list, tuple)) and isinstance(data, list):
        for i, (o, d) in enumerate(zip(obj, data)):
            found += _ollama_unknown(o, d, f"{path}[{i}]")
    return found


def ollama_reply(path: str, data: Any) -> Any:
    """One JSON object of an Ollama reply, strictly (types, required fields, no unknown field)."""
    import ollama

    model = getattr(ollama, OLLAMA_MODELS[path])
    try:
        obj = model.model_validate_json(json.dumps(data), strict=True)
    except pydantic.ValidationError as exc:
        raise StrictError(f"{path} does not validate strictly as ollama.{model.__name__}:\n{exc}\n"
                          f"{json.dumps(data)[:2000]}") from None
    unknown = [p for p in _ollama_unknown(obj, data) if not any(re.fullmatch(a, p) for a in OLLAMA_EXTENSIONS)]
    if unknown:
        raise StrictError(f"{path} carries fields ollama.{model.__name__} does not define: {unknown}")
    return obj


def check_ollama_reply(method: str, path: str, status: int, content_type: str, raw: bytes) -> None:
    """An Ollama route's reply: each NDJSON line or the JSON body against the client's model; an error is
    ``{"error": "<message>"}`` and nothing else."""
    if method == "HEAD" or not raw:
        return
    lines = raw.decode("utf-8").splitlines() if content_type.startswith("application/x-ndjson") else [raw]
    for line in lines:
        if not line:
            continue
        data = json.loads(line)
        if status >= 400 or "error" in data:
            if set(data) != {"error"} or not isinstance(data["error"], str):
                raise StrictError(f"{path} answered {status} with an error that is not {{'error': str}}: {data}")
        elif path in OLLAMA_MODELS and method != "DELETE":
            ollama_reply(path, data)


class StrictApp:
    """An ASGI wrapper that records every reply; ``failures()`` validates them all (when the test ends), so a
    test cannot pass over a non-conforming reply. Nothing is validated while the server runs: the checks
    cost no time on the event loop an in-process client shares (timings stay what the server makes them)."""

    def __init__(self, app, tools_echo: bool = True):
        self.app, self.tools_echo = app, tools_echo
        self.replies: list[tuple] = []

    def failures(self) -> list[str]:
        out = []
        for method, path, anthropic_header, status, content_type, body in self.replies:
            try:
                check_reply(method, path, anthropic_header, status, content_type, body, self.tools_echo)
            except (StrictError, ValueError) as exc:
                out.append(f"{method} {path} → {status}: {exc}")
        return out

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        reply = {"status": 0, "type": "", "body": bytearray(), "done": False, "kept": False}

        def keep():
            if not reply["kept"] and reply["status"] and (reply["done"]
                                                          or reply["type"].startswith("text/event-stream")):
                reply["kept"] = True
                self.replies.append((scope["method"], scope["path"], "anthropic-version" in headers,
                                     reply["status"], reply["type"], bytes(reply["body"])))

        async def recording_send(message):
            if message["type"] == "http.response.start":
                reply["status"] = message["status"]
                for k, v in message.get("headers", []):
                    if k.decode("latin-1").lower() == "content-type":
                        reply["type"] = v.decode("latin-1")
            elif message["type"] == "http.response.body":
                reply["body"] += message.get("body", b"")
                reply["done"] = not message.get("more_body", False)
                if reply["done"]:  # kept before the client can read its last byte: a test that ends at once
                    keep()         # (its fixture then checking the replies) still has it checked
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            keep()

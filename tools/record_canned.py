"""The canned replies of ``record_proxy.py`` (no ``--upstream``): minimal valid answers on each wire, and the
error bodies ``--fail`` injects. Python stdlib only, like the proxy."""

from __future__ import annotations

import json
import time
import uuid


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def sse(event: str | None, data: object) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class Canned:
    """Builds minimal valid replies; ``tool`` is (name, args dict) or None."""

    def __init__(self, model: str, tool: tuple[str, dict] | None, text: str = "ok"):
        self.model = model
        self.tool = tool
        self.text = text

    # does this request's history already hold a tool result?
    @staticmethod
    def _has_tool_result(body: dict) -> bool:
        for m in body.get("messages") or []:
            if m.get("role") == "tool":
                return True
            c = m.get("content")
            if isinstance(c, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in c
            ):
                return True
        inp = body.get("input")
        if isinstance(inp, list):
            return any(
                isinstance(i, dict)
                and i.get("type") in ("function_call_output", "custom_tool_call_output")
                for i in inp
            )
        return False

    def _want_tool(self, body: dict) -> bool:
        return self.tool is not None and not self._has_tool_result(body)

    # ---- Anthropic Messages
    def anthropic(self, body: dict):
        model = body.get("model") or self.model
        msg_id = new_id("msg_")
        usage = {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        if self._want_tool(body):
            name, args = self.tool
            block = {"type": "tool_use", "id": new_id("toolu_"), "name": name, "input": args}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": self.text}
            stop = "end_turn"
        if not body.get("stream"):
            return "json", {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [block],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            }
        ev = [
            sse("message_start", {
                "type": "message_start",
                "message": {
                    "id": msg_id, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 0},
                },
            }),
        ]
        if block["type"] == "text":
            ev += [
                sse("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": self.text}}),
            ]
        else:
            ev += [
                sse("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {**block, "input": {}}}),
                sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "input_json_delta",
                                                       "partial_json": json.dumps(block["input"])}}),
            ]
        ev += [
            sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 1}}),
            sse("message_stop", {"type": "message_stop"}),
        ]
        return "sse", ev

    # ---- OpenAI Responses
    def responses(self, body: dict):
        model = body.get("model") or self.model
        resp_id = new_id("resp_")
        created = now()
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 11,
        }
        base = {
            "id": resp_id, "object": "response", "created_at": created, "status": "in_progress",
            "error": None, "incomplete_details": None, "instructions": body.get("instructions"),
            "model": model, "output": [], "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"), "tools": [], "store": body.get("store", True),
            "text": body.get("text") or {"format": {"type": "text"}}, "usage": None, "metadata": {},
        }
        if self._want_tool(body):
            name, args = self.tool
            item_done = {"id": new_id("fc_"), "type": "function_call", "status": "completed",
                         "call_id": new_id("call_"), "name": name, "arguments": json.dumps(args)}
        else:
            item_done = {"id": new_id("msg_"), "type": "message", "status": "completed", "role": "assistant",
                         "content": [{"type": "output_text", "text": self.text, "annotations": []}]}
        done = {**base, "status": "completed", "output": [item_done], "usage": usage}
        if not body.get("stream"):
            return "json", done
        seq = iter(range(10_000))

        def e(kind: str, **kw):
            return sse(kind, {"type": kind, "sequence_number": next(seq), **kw})

        ev = [e("response.created", response=base), e("response.in_progress", response=base)]
        if item_done["type"] == "message":
            item0 = {**item_done, "status": "in_progress", "content": []}
            part = {"type": "output_text", "text": "", "annotations": []}
            loc = {"item_id": item_done["id"], "output_index": 0, "content_index": 0}
            ev += [
                e("response.output_item.added", output_index=0, item=item0),
                e("response.content_part.added", part=part, **loc),
                e("response.output_text.delta", delta=self.text, logprobs=[], **loc),
                e("response.output_text.done", text=self.text, logprobs=[], **loc),
                e("response.content_part.done", part=item_done["content"][0], **loc),
            ]
        else:
            item0 = {**item_done, "status": "in_progress", "arguments": ""}
            ev += [
                e("response.output_item.added", output_index=0, item=item0),
                e("response.function_call_arguments.delta", item_id=item_done["id"], output_index=0,
                  delta=item_done["arguments"]),
                e("response.function_call_arguments.done", item_id=item_done["id"], output_index=0,
                  arguments=item_done["arguments"]),
            ]
        ev += [
            e("response.output_item.done", output_index=0, item=item_done),
            e("response.completed", response=done),
        ]
        return "sse", ev

    # ---- OpenAI Chat Completions
    def chat(self, body: dict):
        model = body.get("model") or self.model
        cid = new_id("chatcmpl-")
        created = now()
        usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
        if self._want_tool(body):
            name, args = self.tool
            call = {"id": new_id("call_"), "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            msg = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            call = None
            msg = {"role": "assistant", "content": self.text}
            finish = "stop"
        if not body.get("stream"):
            return "json", {
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
            }

        def chunk(delta, fin=None, **kw):
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": fin, "logprobs": None}], **kw}

        first = {"role": "assistant", "content": "" if call is None else None}
        body_delta = ({"content": self.text} if call is None
                      else {"tool_calls": [{"index": 0, **call}]})
        ev = [sse(None, chunk(first)), sse(None, chunk(body_delta)), sse(None, chunk({}, finish))]
        if (body.get("stream_options") or {}).get("include_usage"):
            ev.append(sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created,
                                  "model": model, "choices": [], "usage": usage}))
        ev.append(sse(None, "[DONE]"))
        return "sse", ev

    def models(self):
        m = {"id": self.model, "object": "model", "created": now(), "owned_by": "record_proxy",
             "type": "model", "display_name": self.model, "created_at": "2025-01-01T00:00:00Z"}
        return {"object": "list", "data": [m], "has_more": False,
                "first_id": self.model, "last_id": self.model}


def error_body(path: str, status: int) -> dict:
    if path.startswith("/v1/messages"):
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": f"record_proxy: injected {status}"}}
    kind = {400: "invalid_request_error", 401: "invalid_request_error", 404: "not_found_error",
            429: "rate_limit_exceeded"}.get(status, "server_error")
    return {"error": {"message": f"record_proxy: injected {status}", "type": kind, "param": None,
                      "code": None}}

"""What a chat template's failure to render a conversation means, and what is done about it.

Rules:
- A template that refuses the conversation (Jinja's ``raise_exception``: roles out of order, an unsupported turn),
  or fails inside its own code on what the conversation holds, is the client's 400 naming ``messages`` — not a
  crash; one that fails on the client's own template variables names ``chat_template_kwargs``.
- A past call whose arguments are not a JSON object (a call the output cap cut short comes back so: the server
  sends Chat and Responses clients the arguments as generated) trips templates that walk the arguments
  (Qwen3-Coder's ``arguments|items``): rendered again with those arguments as ``{}`` (what Messages and Ollama
  send for them), logged, so the conversation goes on — its tool result says what became of the call.
- Anything else raised outside the template's code is the server's fault and goes on up (a 500).
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import replace
from typing import Callable

from ...chat_request import ChatRequest
from ...errors import invalid
from .messages import template_arguments

log = logging.getLogger("tinytitan.backend")


def rendered(render: Callable[[ChatRequest], str], req: ChatRequest) -> str:
    """``render(req)``, its failures as the rules say."""
    import jinja2

    try:
        return render(req)
    except jinja2.TemplateError as exc:
        raise invalid(f"The model's chat template cannot render this conversation: {exc}", param="messages",
                      code="template_error") from None
    except RecursionError:  # a tool schema or message nested thousands deep
        raise invalid("The request is nested too deeply for the chat template to render", param="messages",
                      code="template_error") from None
    except Exception as exc:
        in_template = any(frame.filename == "<template>" for frame in traceback.extract_tb(exc.__traceback__))
        objects = _with_object_arguments(req) if in_template else None
        if objects is not None:
            log.warning("a past tool call's arguments are not a JSON object and the chat template cannot render "
                        "them (%s: %s); rendered as {}", type(exc).__name__, exc)
            return rendered(render, objects)
        if req.template_kwargs:  # the client's own template variables are what the template tripped on
            raise invalid(f"The model's chat template failed with the template variables sent "
                          f"({', '.join(sorted(req.template_kwargs))}): {type(exc).__name__}: {exc}",
                          param="chat_template_kwargs", code="template_error") from None
        if in_template:
            raise invalid(f"The model's chat template cannot render this conversation: {type(exc).__name__}: "
                          f"{exc}", param="messages", code="template_error") from None
        raise


def _with_object_arguments(req: ChatRequest) -> ChatRequest | None:
    """``req`` with each call's arguments that are not a JSON object made ``{}``; None where all are objects."""
    def whole(call) -> bool:
        return isinstance(template_arguments(call.arguments), dict)

    if all(whole(c) for m in req.messages for c in m.tool_calls):
        return None
    return req.with_(messages=tuple(
        replace(m, tool_calls=tuple(c if whole(c) else replace(c, arguments="{}") for c in m.tool_calls))
        if m.tool_calls else m for m in req.messages))

"""OpenAI Responses: request fields the tables cannot say (input, tool choice, text, prompt-cache options), the
prompt-cache diagnostics a response carries, and the store's not-found error."""

from __future__ import annotations


from ..errors import ApiError
from ..output_format import normalise
from .. import tool_choice
from ..speclang.validate import Validated
from .responses_input import normalise_input


def hook_input(value, body: dict, args: dict, v: Validated) -> None:
    v.state.items = normalise_input(value)


def hook_tool_choice(value, body: dict, args: dict, v: Validated) -> None:
    args["tool_choice"], args["tool_names"] = tool_choice.openai(value)


def hook_text(value: dict, body: dict, args: dict, v: Validated) -> None:
    if value.get("format") is not None:
        args["grammar"] = normalise(value["format"], "text.format")


# the engine's reasons for a prompt-cache miss (cache/miss.py) → PromptCacheDiagnosticsCacheMiss.reason; a reason
# with no counterpart there (a changed setting: tool choice, reasoning level or output format) is "unavailable"
CACHE_MISS_REASONS = {"system_changed": "input_changed", "messages_changed": "input_changed",
                      "thinking_dropped": "input_changed", "answer_rewritten": "input_changed",
                      "template_rerender": "input_changed", "tools_changed": "tools_changed"}


def hook_prompt_cache_options(value: dict, body: dict, args: dict, v) -> None:
    if value.get("comparison_response_id") is not None:
        args["cache_compare"] = value["comparison_response_id"]


def prompt_cache_diagnostics(compared: dict | None) -> dict:
    """The response's ``prompt_cache_diagnostics``: this prompt against the compared response's (the engine's
    ``cache_compared``)."""
    if compared is None:
        return {"type": "unavailable"}
    reason = compared["reason"]
    if reason == "hit":
        return {"type": "cache_hit"}
    if reason == "not_found":
        return {"type": "comparison_response_not_found"}
    if reason not in CACHE_MISS_REASONS:
        return {"type": "unavailable"}
    return {"type": "cache_miss", "reason": CACHE_MISS_REASONS[reason],
            "cache_missed_tokens": int(compared.get("missed_tokens") or 0),
            "comparison_reusable_tokens": int(compared.get("offset") or 0)}


def not_stored(response_id: str, param: str | None = None) -> ApiError:
    # the API's own sentence first (clients and proxies match on it), then why, for people
    return ApiError("not_found", f"Response with id '{response_id}' not found. (It was never stored, was deleted, or "
                    "was evicted by the store's retention.)", param=param or "response_id")


LOGPROBS = "message.output_text.logprobs"


def rule_logprobs(body: dict, args: dict, v: Validated) -> None:
    """``include: ["message.output_text.logprobs"]`` asks for each output_text token's log probability, with
    ``top_logprobs`` alternatives (alone, ``top_logprobs`` returns none, as the API: the SDKs add the include)."""
    if LOGPROBS in (body.get("include") or ()):
        args["logprobs"] = body.get("top_logprobs") or 0

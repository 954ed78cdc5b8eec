"""Compaction: a conversation summarised into one opaque ``compaction`` item, and read back.

Rules:
- The transcript (input items, role-labelled; the client's leading system/developer prompt left out, since
  it is sent again with every request) is summarised by the engine's summariser (tinytitan/engine/
  summarise.py: the served model under a handover instruction, within ``max_compaction_tokens``, with its
  guards and its ``mode``: ``model``, ``compressed`` or ``extractive``).
- Server-side compaction (Responses' ``context_management``): past the threshold, the turns before the
  newest user turn are summarised; the reply reads the client's standing prompt, that summary and the
  newest turn, and the response's output is the ``compaction`` item, then the reply. Under it, items before
  the latest compaction item are superseded by it (the API: it carries the context needed from there on).
  Such an item summarised only what came before the newest user turn: it carries that turn's items as they
  were (``kept`` in its payload), read after the summary as the reply read them, whether or not the client
  sends the items before the item again (the API's guide lets it drop them). So it supersedes what came before
  it even where a later request does not repeat ``context_management``. (A ``/compact`` or
  ``compaction_trigger`` item summarised everything before it, and keeps nothing.)
- Tools a client-executed tool search loaded (``tool_search_call`` / ``tool_search_output`` pairs) in what is
  summarised stay loaded: the item carries the pairs (``loaded``), read right after it where the input does not
  hold them still. A summary names tools, it does not declare them; without the pairs the model could no longer
  call what it had loaded.
- The item's ``encrypted_content`` is base64 of JSON ``{v, model, createdAt, mode, summary[, kept][, loaded]}``
  (v = 1). It
  is not secret: this server only needs to read its own items back. One it cannot read is refused by
  name (``compaction_payload_invalid``).
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import time
from typing import TYPE_CHECKING, AsyncContextManager, AsyncIterable, AsyncIterator, Callable

from .. import images
from ..errors import ApiError, invalid
from ..events import Failed, Finished, Started, TextDelta, TokenEvent
from ..memo import BoundedMemo
from ..observe.turn import passes, reading
from .failure import refusal_or_failure

if TYPE_CHECKING:
    from ..engine.summarise import Summariser

VERSION = 1

ContentReader = Callable[[dict, str], tuple]  # (an item, its content field) → its parts in order, () for no image

CONTEXT_HEADER = "Summary of the earlier conversation (compacted):"


# -- the item ---------------------------------------------------------------------------------------------
DECODED_KEPT = 8  # payloads kept decoded (``decode``), the least recently read forgotten first
_DECODED: BoundedMemo[str, dict] = BoundedMemo(DECODED_KEPT)


def encode(summary: str, mode: str, model: str, kept: list[dict] | None = None,
           loaded: list[dict] | None = None) -> str:
    """``kept``: the items of the newest user turn, which the summary leaves out (server-side compaction);
    ``loaded``: the tool search pairs of the summarised items (``searches``)."""
    payload = {"v": VERSION, "model": model, "createdAt": int(time.time()), "mode": mode, "summary": summary}
    if kept:
        payload["kept"] = kept
    if loaded:
        payload["loaded"] = loaded
    return base64.b64encode(json.dumps(payload, ensure_ascii=False).encode()).decode()


def decode(encrypted_content: str, where: str) -> dict:
    """The item's payload, checked. Shared: a request reads it three times (checked, what it carries, its
    summary), so the ``DECODED_KEPT`` most recently read are kept decoded; read it, never change it."""
    return _DECODED.recall(encrypted_content, lambda: _read(encrypted_content, where))


def _read(encrypted_content: str, where: str) -> dict:
    try:
        payload = json.loads(base64.b64decode(encrypted_content.encode(), validate=True).decode())
        if not isinstance(payload, dict) or payload.get("v") != VERSION or not isinstance(payload.get("summary"), str):
            raise ValueError("not a version-1 compaction payload")
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError) as exc:
        why = "its JSON is nested too deeply" if isinstance(exc, RecursionError) else exc
        raise invalid(f"The compaction item at {where} was not made by this server and cannot be read ({why})",
                      param=where, code="compaction_payload_invalid") from None
    return payload


def as_context(payload: dict) -> str:
    return f"{CONTEXT_HEADER}\n{payload['summary']}"


# -- the transcript ---------------------------------------------------------------------------------------
def transcript_to_compact(items: list[dict], read: ContentReader | None = None) -> tuple:
    """The transcript a compaction summarises, as text and images (``transcript_parts``); a 400 when there is no
    conversation in it (only a standing system prompt, reasoning, or nothing): a summary of nothing would be
    invented."""
    parts = transcript_parts(items, read)
    if not "".join(p for p in parts if isinstance(p, str)).strip():
        raise invalid("There is nothing to compact: the conversation has no messages, tool calls or results "
                      "after its system prompt", param="input", code="empty_input")
    return parts


IMAGE_MARK = images.TRANSCRIPT_MARK  # what an image is in a transcript's text


def parts_text(content) -> str:
    """A checked message content or tool output (a string or text and image parts) as one string (an image
    stands as ``[image]``: a transcript's text)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(IMAGE_MARK if part["type"] == "input_image" else part["refusal" if part["type"] == "refusal"
                                                                           else "text"] for part in content)


def transcript(items: list[dict]) -> str:
    """The transcript as text, each image standing as ``[image]``."""
    return images.transcript_text(transcript_parts(items))


def transcript_parts(items: list[dict], read: ContentReader | None = None) -> tuple:
    """The transcript as text and images in order (adjacent text joined). ``read(item, field)``: a message's
    ``content`` or a tool's ``output`` as its parts, images read as a request reads them (refusing what a request
    refuses, named by place), or () where it holds no image; without it every image stands as ``[image]``."""
    out: list = []

    def add(*parts) -> None:
        for part in parts:
            if isinstance(part, str) and out and isinstance(out[-1], str):
                out[-1] += part
            elif not isinstance(part, str) or part:
                out.append(part)

    def content(item: dict, field: str) -> None:
        parts = read(item, field) if read is not None else ()
        if not parts:
            return add(parts_text(item.get(field)))
        for j, part in enumerate(parts):
            add("\n" if j else "", part)

    started = False  # the client's standing system/developer prompt (before the first turn) is left out:
    for item in items:  # it is sent again with every request, and a summary need not repeat it
        kind = item.get("type")
        if kind == "message" and item["role"] in ("system", "developer") and not started:
            continue
        started = started or kind != "reasoning"
        if kind not in LINE_ITEMS:
            continue
        add("\n\n" if out else "")
        if kind == "message":
            role = {"developer": "System"}.get(item["role"], item["role"].capitalize())
            add(f"{role}: ")
            content(item, "content")
        elif kind in ("function_call_output", "custom_tool_call_output"):
            add(f"Tool result [call {item['call_id']}]: ")
            content(item, "output")
        else:
            add(_line(item))
    return tuple(out)


LINE_ITEMS = ("message", "function_call", "custom_tool_call", "function_call_output", "custom_tool_call_output",
              "tool_search_call", "tool_search_output", "compaction")


def _line(item: dict) -> str:
    """An item's line in the transcript (a message's and a tool output's are ``transcript_parts``'s)."""
    kind = item["type"]
    if kind == "function_call":
        name = f"{item['namespace']}.{item['name']}" if item.get("namespace") else item["name"]
        return f"Assistant called {name}({item.get('arguments') or ''}) [call {item['call_id']}]"
    if kind == "custom_tool_call":
        return f"Assistant called {item['name']}: {item['input']} [call {item['call_id']}]"
    if kind == "tool_search_call":
        return f"Assistant searched the tools: {json.dumps(item.get('arguments') or {})} [call {item.get('call_id')}]"
    if kind == "tool_search_output":
        names = ", ".join(t.get("name", "?") for t in item.get("tools") or () if isinstance(t, dict))
        return f"Tools loaded [call {item.get('call_id')}]: {names or 'none'}"
    return f"Earlier summary: {decode(item['encrypted_content'], 'input')['summary']}"  # (a compaction item)


async def compaction_events(compactor: "Summariser", text: tuple, result: dict) -> AsyncIterator[TokenEvent]:
    """The token events of a compaction turn (the ``compaction`` entry of the Responses machine): Started at
    once, then the summary as one TextDelta; ``result`` gets the mode for the item."""
    reading(compactor)  # (a client that hangs up mid-summary: what its passes decoded counts)
    try:
        yield Started(await compactor.prompt_tokens(text))
        summary = await compactor.summarise(text)
    except ApiError as exc:  # (the server stopping mid-summary is said as its generations say it: 503 in band)
        yield refusal_or_failure(exc)
        return
    result["mode"] = summary.mode
    yield TextDelta(summary.text)
    yield Finished("stop", summary.usage)


# -- server-side compaction (context_management) ------------------------------------------------------------
def standing(item: dict) -> bool:
    """An item of the standing prompt, where it leads the conversation: a system or developer message."""
    return item.get("type") == "message" and item.get("role") in ("system", "developer")


def standing_count(items: list[dict], within: int | None = None) -> int:
    """How many items lead ``items`` (the first ``within`` of them, where given) as its standing prompt."""
    end = len(items) if within is None else min(within, len(items))
    lead = 0
    while lead < end and standing(items[lead]):
        lead += 1
    return lead


def superseded(items: list[dict], managed: bool = True) -> list[dict]:
    """The items a conversation under server-side compaction (``managed``) still reads: the standing prompt
    (leading system / developer messages), then from the latest compaction item on, the items it carries (the
    newest turn it left out of its summary) right after it. Not ``managed``, only an item that carries a turn
    supersedes what came before it (it was made under server-side compaction)."""
    last = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if last is None:
        return items
    payload = decode(items[last]["encrypted_content"], "input")
    kept = payload.get("kept") or []
    if not managed and not kept:
        return items[:last + 1] + _still_loaded(payload, items) + items[last + 1:]
    lead = standing_count(items)
    read = items[:lead] + [items[last]] + items[last + 1:]
    return items[:lead] + [items[last]] + _still_loaded(payload, read) + copy.deepcopy(kept) + items[last + 1:]  # (the
    # payload is shared)


def _still_loaded(payload: dict, items: list[dict]) -> list[dict]:
    """The search pairs a compaction item carries that ``items`` do not hold themselves (a client that kept the
    items the summary covers sends them again)."""
    held = {_pair_key(item) for item in items}
    return [copy.deepcopy(item) for item in payload.get("loaded") or () if _pair_key(item) not in held]


def _is_user(item: dict) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def split_for_compaction(items: list[dict]) -> tuple[list[dict], list[dict], list[dict]] | None:
    """(standing prompt, the turns to summarise, the newest user turn on); None when there is nothing before
    the newest user turn to summarise."""
    lead = standing_count(items)
    users = [i for i, item in enumerate(items) if _is_user(item)]
    if not users:
        return None
    start = _turn_start(items, users, users[-1])
    if start <= lead or not transcript(items[lead:start]).strip():
        return None
    return items[:lead], items[lead:start], items[start:]


def searches(items: list[dict]) -> list[dict]:
    """The tool search pairs of ``items`` that loaded tools (each output after its call, where the call is
    there), those an earlier compaction item carried included: what a summary of ``items`` must carry."""
    out: list[dict] = []
    calls = {item.get("call_id"): item for item in items if item.get("type") == "tool_search_call"}
    for item in items:
        if item.get("type") == "compaction":
            out += decode(item["encrypted_content"], "input").get("loaded") or []
        elif item.get("type") == "tool_search_output" and item.get("tools"):
            out += [calls[item.get("call_id")]] if item.get("call_id") in calls else []
            out.append(item)
    # once each: the pairs an earlier item carried are read after it (superseded), so they are among ``items`` too
    once: dict = {}
    for item in out:
        once.setdefault(_pair_key(item), item)
    return copy.deepcopy(list(once.values()))


def _pair_key(item: dict) -> tuple:
    """What tells one item of a search pair from another: its type and its call."""
    return item.get("type"), item.get("call_id")


CALL_ITEMS = ("function_call", "custom_tool_call", "tool_search_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "tool_search_output")


def _turn_start(items: list[dict], users: list[int], start: int) -> int:
    """Where the newest turn starts: at its user message, or — where a result in it answers a call made before
    that message (a client may send a user message between a call and its result) — at the user message of the
    call's turn, so a call and its result are never parted (summarised apart, the result would answer no call)."""
    caller = {item.get("call_id"): i for i, item in enumerate(items) if item.get("type") in CALL_ITEMS}
    while True:
        earlier = [caller[item.get("call_id")] for item in items[start:]
                   if item.get("type") in OUTPUT_ITEMS and caller.get(item.get("call_id"), start) < start]
        if not earlier:
            return start
        first = min(earlier)
        start = next((u for u in reversed(users) if u <= first), first)


async def compacted_events(compactor: "Summariser", text: tuple, result: dict,
                           reply: Callable[[str], AsyncContextManager[AsyncIterable[TokenEvent]]]
                           ) -> AsyncIterator[TokenEvent]:
    """A turn compacted on the way (the ``compacted`` entry of the Responses machine): the summary's events
    (without their Finished), then the events of the session ``reply(summary text)`` opens."""
    summary = []
    async for ev in compaction_events(compactor, text, result):
        if isinstance(ev, Finished):
            passes(ev.usage)  # the summary pass's tokens, in the request's record (metrics, log line) …
            reading(None)  # … counted there, not also as the passes' decoded tokens
            break
        yield ev
        if isinstance(ev, Failed):
            return
        if isinstance(ev, TextDelta):
            summary.append(ev.text)
    async with reply("".join(summary)) as session:
        reading(session)  # (a client that hangs up mid-reply: what the reply decoded counts)
        async for ev in session:
            yield ev

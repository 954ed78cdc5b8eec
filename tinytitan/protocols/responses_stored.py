"""OpenAI Responses, what is stored: reading a stored response and its chain (previous_response_id, item
references), and the routes that serve the store (GET, DELETE, cancel, input_items)."""

from __future__ import annotations

import logging

from ..errors import ApiError, invalid
from ..speclang.machine import WireEvent
from ..store.responses_store import CursorNotFound, StoredResponse
from . import compaction
from .responses_fields import not_stored
from .common import reasoning_payload
from .responses_input import reasoning_text
from .responses_socket import LocalResponses
from .wire import Call, Reply

log = logging.getLogger("tinytitan.responses")


# the listed item types with a status (``ResponseItem``'s members: an assistant's message and the calls and their
# outputs require one), and the fields an input may leave out that the listed item must have: filled in here, as
# listed, and only here; the stored item (and the prompt) as the client sent it
STATUS_REQUIRED = ("message", "function_call", "function_call_output", "custom_tool_call",
                   "custom_tool_call_output", "tool_search_call", "tool_search_output")


def as_listed(item: dict) -> dict:
    """A stored input item as ``input_items`` lists it (the API's ``ResponseItem``)."""
    kind = item.get("type")
    if kind not in STATUS_REQUIRED:
        return item
    item = dict(item)
    if item.get("status") is None:
        item["status"] = "completed"
    if kind == "custom_tool_call_output" and item.get("output") is None:
        item["output"] = ""
    if kind in ("tool_search_call", "tool_search_output") and item.get("execution") is None:
        item["execution"] = "client"  # (the only kind this server takes)
    return item


def chained(links: list[tuple[list[dict], list[dict]]]) -> list[dict]:
    """A chain's items (each response's input, then output; the oldest first). A compaction item a response
    output that carries no turn (a ``compaction_trigger`` turn's: a summary of everything before it) supersedes
    what came before it, the standing prompt (leading system / developer messages) aside: with
    ``previous_response_id`` the client prunes nothing, and the summary is what the next turn reads. (An item that
    carries a turn, server-side compaction's, is read by ``compaction.superseded`` where the request reads it.)"""
    items = [item for inp, out in links for item in inp + out]
    end = len(items)
    for inp, out in reversed(links):
        end -= len(inp) + len(out)
        made = [j for j, item in enumerate(out) if item.get("type") == "compaction"
                and not compaction.decode(item["encrypted_content"], "previous_response_id").get("kept")]
        if made:
            cut = end + len(inp) + made[-1]
            lead = compaction.standing_count(items, cut)
            return items[:lead] + items[cut:]
    return items


def with_thoughts(data):
    """A stored event or response with each reasoning item's thought as its ``encrypted_content`` (what ``include:
    ["reasoning.encrypted_content"]`` on the create request gives it), copied where it changes."""
    if isinstance(data, list):
        return [with_thoughts(v) for v in data]
    if not isinstance(data, dict):
        return data
    data = {k: with_thoughts(v) for k, v in data.items()}
    if data.get("type") == "reasoning" and data.get("encrypted_content") is None and data.get("content"):
        data["encrypted_content"] = reasoning_payload(reasoning_text(data))
    return data


class StoredResponses:
    """The stored side of the Responses protocol (a part of ``OpenAIResponses``): it reads through the
    protocol's ``store()``."""

    async def stored(self, response_id: str, param: str | None = None) -> StoredResponse:
        rec = await self.store().get(response_id)
        if rec is None:
            raise not_stored(response_id, param)
        return rec

    async def history(self, response_id: str | None, local: "LocalResponses | None" = None) -> list[dict]:
        """The input and output of a stored chain, oldest first (a connection's own responses first), from its
        latest summary of everything before it on (``chained``)."""
        links: list[tuple[list[dict], list[dict]]] = []  # each response's (input, output), newest first
        first, seen = response_id, set()
        while response_id and response_id not in seen:
            seen.add(response_id)
            rec = local.get(response_id) if local is not None else None
            if rec is not None:
                links.append((rec.input, rec.output))
                response_id = rec.previous_response_id
                continue
            found = await self.store().chain_links(response_id)
            if found is None:
                detail = "" if response_id == first else f" (the chain of '{first}' continues it)"
                # the API's own error (400, previous_response_not_found): clients match on it to resend whole
                raise invalid(f"Previous response with id '{response_id}' not found.{detail}",
                              param="previous_response_id", code="previous_response_not_found")
            parts, response_id = found
            links += reversed(parts)
        return chained(links[::-1])

    async def resolve(self, items: list[dict], field: str = "input") -> list[dict]:
        out = []
        for i, item in enumerate(items):
            if item.get("type") == "item_reference":
                found = await self.store().find_item(item["id"]) if isinstance(item.get("id"), str) else None
                if found is None:
                    raise ApiError("not_found", f"Item with id '{item['id']}' not found", param=f"{field}[{i}].id")
                item = found
            elif item.get("type") == "reasoning" and not reasoning_text(item):
                item = await self._stored_thought(item)
            out.append(item)
        return out

    async def _stored_thought(self, item: dict) -> dict:
        """A reasoning item sent back with no text of its own (LangChain streamed sends the item as
        ``output_item.added`` announced it: ``content: []``) is the stored item its id names, as the API reads
        it (store: false is its "Item with id 'rs_…' not found"); one the store lacks carries nothing."""
        found = await self.store().find_item(item["id"]) if isinstance(item.get("id"), str) else None
        if found is None or found.get("type") != "reasoning" or not reasoning_text(found):
            return item
        return {**item, **{key: found[key] for key in ("content", "summary", "encrypted_content") if found.get(key)}}

    async def retrieve(self, call: Call, response_id: str) -> Reply:
        include = call.args["include"]
        if "message.output_text.logprobs" in include:  # (a stored response holds what its create asked)
            raise invalid("include 'message.output_text.logprobs' is not supported when retrieving a response: ask "
                          "for it when creating the response", param="include", code="unsupported_value")
        rec = await self.stored(response_id)
        shown = with_thoughts if "reasoning.encrypted_content" in include else (lambda data: data)
        if not call.args["stream"]:
            return Reply(shown(rec.response))
        after = call.args["starting_after"]

        async def replay():
            for data in rec.events:
                if data.get("sequence_number", 0) > after:
                    yield WireEvent(data.get("type"), shown(data)).sse()

        return Reply.of_stream(replay(), self.spec.content_type)

    async def delete(self, call: Call, response_id: str) -> Reply:
        if not await self.store().delete(response_id):
            raise not_stored(response_id)
        return Reply({"id": response_id, "object": "response", "deleted": True})

    async def cancel(self, call: Call, response_id: str) -> Reply:
        await self.stored(response_id)
        raise invalid(f"Cannot cancel a synchronous response. (Only background responses can be cancelled, and "
                      f"this server runs none: '{response_id}' finished before it was stored.)", param="response_id",
                      code="not_cancellable")  # (the API's own sentence first)

    async def input_items(self, call: Call, response_id: str) -> Reply:
        limit, order = call.args["limit"], call.args["order"]  # typed and bounded by the route's query table
        try:  # (older SDKs page backwards with 'before'); a page right after 'after' (or from the start)
            page = await self.store().input_page(response_id, limit, order, call.args["after"], call.args["before"])
        except CursorNotFound as exc:
            raise invalid(f"Invalid value for '{exc.name}': no input item '{exc.value}' in response '{response_id}'",
                          param=exc.name, code="invalid_value") from None
        if page is None:
            raise not_stored(response_id)
        data = [as_listed(item) for item in page.data]
        return Reply({
            "object": "list", "data": data, "first_id": data[0].get("id") if data else None,
            "last_id": data[-1].get("id") if data else None, "has_more": page.has_more,
            "limit": limit, "order": order,
        })

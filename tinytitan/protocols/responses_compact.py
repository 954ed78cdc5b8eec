"""OpenAI Responses, the summary routes: ``/v1/responses/compact`` and Codex's ``trace_summarize``, and the
transcript every compaction summarises (these routes, a ``compaction_trigger`` turn, ``context_management``).

Rules:
- A transcript's images are read as the same request's would be, and refused as its would be (a remote URL the
  server does not fetch, a damaged image, a format or size not taken, too many: the same 400s, named by their
  place: ``input[2]``, a trace's ``traces[1].items[2]``); the remote images of either route's body are fetched
  first where the server fetches them. The engine's
  summariser then shows them to a model that reads images, and ``[image]`` to one that does not
  (tinytitan/engine/summarise.py).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..errors import ApiError
from ..observe.turn import note
from ..speclang import template
from . import compaction
from .base import new_id
from .responses_input import item_content, normalise_input
from .wire import Call, Reply

if TYPE_CHECKING:
    from ..engine.summarise import Summariser


def places(own: list[dict], field: str = "input") -> dict[str, str]:
    """Item id → where the item stands in the request (``input[3]``; ``field``: the list that holds the items):
    what an error about it names."""
    return {item["id"]: f"{field}[{i}]" for i, item in enumerate(own or ()) if item.get("id")}


def summary_transcript(compactor: "Summariser", items: list[dict], own: list[dict], field: str = "input") -> tuple:
    """What ``compactor`` summarises of ``items``: their transcript, text and images, the images read and checked
    as a request's (``own``: the request's items, at ``field``, which name a refused one's place)."""
    where = places(own, field)
    transcript = compaction.transcript_to_compact(items, lambda item, field: item_content(item, field, where)[1])
    compactor.check(transcript)
    return transcript


class SummaryRoutes:
    """The routes that answer a summary (a mixin of OpenAIResponses)."""

    async def compact(self, call: Call) -> Reply:
        call = await self.fetched(call)
        body = self.compact_validator.validate(self.compact_validator.parse_json(call.body)).body
        model_id, _ = self.engine.resolve(body["model"])
        items = normalise_input(body.get("input") or [])
        history, own = await self.conversation(body, items)
        items = [i for i in history + own if i.get("type") != "compaction_trigger"]
        compactor = self.engine.summariser(body["model"], body.get("max_compaction_tokens"))
        summary = await compactor.summarise(summary_transcript(compactor, items, own))
        note(model_id, summary.usage)  # the passes' tokens, in the metrics and the request's log line
        output = []
        if body.get("instructions"):
            output.append({"id": new_id("msg_"), "type": "message", "status": "completed", "role": "developer",
                           "content": [{"type": "input_text", "text": body["instructions"]}]})
        output.append({"id": new_id("cmp_"), "type": "compaction",
                       "encrypted_content": compaction.encode(summary.text, summary.mode, model_id,
                                                              loaded=compaction.searches(items))})
        return Reply(template.render(self.spec.extra["compact_response"], {  # its shape is the spec's
            "id": new_id("resp_"), "created_at": int(time.time()), "output": output,
            "ev": SimpleNamespace(usage=summary.usage)}, self.spec.maps))

    async def trace_summarize(self, call: Call) -> Reply:
        """Codex's memories: each trace summarised (see extra.trace_summarize_request)."""
        call = await self.fetched(call, [path.replace("input[]", "traces[].items[]", 1)
                                         for path in self.spec.extra.get("image_urls", ())])
        body = self.trace_validator.validate(self.trace_validator.parse_json(call.body)).body
        model_id, _ = self.engine.resolve(body["model"])
        transcripts = []
        for i, trace in enumerate(body["traces"]):  # every trace checked, images included, before any is summarised
            try:
                checked = self.compact_validator.validate({"model": body["model"], "input": trace["items"]}).body
            except ApiError as err:
                where = (err.param or "input").replace("input", f"traces[{i}].items", 1)
                raise ApiError(err.kind, err.message.replace("input", f"traces[{i}].items", 1), where, err.code,
                               err.headers, err.data) from None
            items = normalise_input(checked["input"])
            compactor = self.engine.summariser(body["model"])
            transcripts.append((compactor, summary_transcript(
                compactor, [it for it in items if it.get("type") != "compaction_trigger"], items,
                f"traces[{i}].items")))
        out = []
        for compactor, transcript in transcripts:
            summary = await compactor.summarise(transcript)
            brief = await self.engine.summariser(body["model"], self.spec.extra["memory_summary_tokens"]).summarise(
                summary.text)
            note(model_id, summary.usage + brief.usage)
            out.append({"trace_summary": summary.text, "memory_summary": brief.text})
        return Reply({"output": out})

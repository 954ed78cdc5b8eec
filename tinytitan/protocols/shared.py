"""Routes every client shares: health, the model list, one model, unload, and the bare root (Ollama's answer,
the dashboard or the JSON status, by the Accept header: spec/shared.yaml's ``extra.root``).

``GET /v1/models`` answers in OpenAI's list shape, Anthropic's with ``anthropic-version``, and Codex's model
catalog (``{"models": [...]}``, tinytitan/agents.py) when it carries Codex's ``client_version`` query."""

from __future__ import annotations

import time
from ..agents import codex_entries
from ..errors import ApiError, invalid
from ..models.gguf_facts import listing_off_loop
from ..observe import dashboard
from ..speclang import SpecError
from .base import Protocol
from .wire import Call, Reply


def anthropic_capabilities(card: dict) -> dict:
    """A model card's capabilities in the shape of Anthropic's Models API: what the Messages route does
    with this model (plain-text documents are read, PDFs, citations and server tools refused by name there; images
    as the model says)."""
    def yes(flag: bool) -> dict:
        return {"supported": bool(flag)}

    thinks = card["reasoning"]
    return {
        "batch": yes(False), "citations": yes(False), "code_execution": yes(False), "image_input": yes(False),
        "pdf_input": yes(False),
        # Messages applies clear_tool_uses and takes clear_thinking (protocols/context_edits.py); compaction is refused
        "context_management": {"supported": True, "clear_tool_uses_20250919": yes(True),
                               "clear_thinking_20251015": yes(True), "compact_20260112": yes(False)},
        # every level output_config.effort takes on Messages (spec/anthropic_messages.yaml), xhigh included
        "effort": {"supported": thinks, **{lvl: yes(thinks) for lvl in ("low", "medium", "high", "xhigh", "max")}},
        "server_tools": {"supported": False, "code_execution": yes(False), "web_search": yes(False)},
        "structured_outputs": yes(card["structured_output"]),
        "thinking": {"supported": thinks, "types": {"adaptive": yes(thinks), "enabled": yes(thinks),
                                                     "disabled": yes(True), "between_tools": yes(thinks)}},
    }


class Shared(Protocol):
    name = "shared"

    def __init__(self, spec_directory=None):
        super().__init__(spec_directory)
        # GET /: Accept type -> answer, in the spec's order (its shape checked when the spec loads: meta_schema.yaml;
        # a handler's name here, against the answers this module gives: ``root_handlers``, their one list)
        self.root_answers = self.spec.extra["root"]
        self.root_handlers = {"dashboard": self.dashboard, "status": self.status}
        for accept, answer in self.root_answers.items():
            if "handler" in answer and answer["handler"] not in self.root_handlers:
                raise SpecError(f"{self.spec.source}: extra.root.{accept}: handler {answer['handler']!r} is not one "
                                f"of the shared module's answers: {', '.join(self.root_handlers)}")

    def handlers(self):
        return {"health": self.health, "root": self.root, "list_models": self.list_models,
                "get_model": self.get_model, "unload_model": self.unload_model, "metrics": self.metrics,
                "profile": self.profile, "load_model": self.load_model, "dashboard": self.dashboard,
                "dashboard_events": self.dashboard_events, "unsupported": self.unsupported}

    async def unsupported(self, call: Call) -> Reply:
        raise ApiError("not_implemented", f"{call.method} {call.path} is not supported: this server serves chat models "
                       "and has no embeddings", code="not_implemented")

    @property
    def observer(self):
        return self.services.observer

    async def health(self, call: Call) -> Reply:
        """200 while the server can generate; 503 once it cannot (a broken group of processes: the body names
        the ranks lost and why), so a load balancer or a script sees it by the status alone."""
        health = self.engine.health()
        return Reply(health, status=503 if health.get("status") == "broken" else 200)

    async def root(self, call: Call) -> Reply:
        """GET / and HEAD /: the answer the Accept header ranks highest of the spec's ``extra.root`` (Ollama's
        ``Ollama is running`` for curl and HTTP libraries, the dashboard for a browser, the JSON status where
        JSON is asked for); HEAD sends the same headers without the body. Each says it was chosen by Accept
        (``Vary``): a cache that is not told serves the answer it stored to every client (the dashboard to
        ``ollama``'s heartbeat, Ollama's text to a browser); with ``--api-key``, by the key too (the JSON status
        names the model only to a client that sends it)."""
        answer = self.root_answers[call.prefers(*self.root_answers)]
        if "text" in answer:
            reply = Reply.of_text(answer["text"], "text/plain; charset=utf-8")
        else:
            reply = await self.root_handlers[answer["handler"]](call)
        config = self.services.config
        keyed = config is not None and config.api_key
        reply.headers["Vary"] = "Accept, Authorization, X-Api-Key" if keyed else "Accept"
        return reply

    async def status(self, call: Call) -> Reply:
        """The server's status as JSON: whether routes need ``--api-key`` (the dashboard asks for the key before
        its first call, not after a 401); the model id, which needs the key (http/guard.py)."""
        config = self.services.config
        return Reply({"name": "tinytitan", "status": "ok", "model": self.engine.model_id,
                      "api_key_required": bool(config is not None and config.api_key)})

    async def dashboard(self, call: Call) -> Reply:
        return Reply.of_text(dashboard.page(), dashboard.CONTENT_TYPE, **{
            "Content-Security-Policy": dashboard.CSP, "Cache-Control": "no-store"})

    async def dashboard_events(self, call: Call) -> Reply:
        return Reply.of_stream(dashboard.feed(self.observer), "text/event-stream; charset=utf-8")

    @staticmethod
    def _anthropic(call: Call) -> bool:
        return "anthropic-version" in call.headers

    def _entry(self, info: dict, anthropic: bool, facts: dict) -> dict:
        created = int(info.get("created") or self.engine.started_at)
        if anthropic:
            entry = {"type": "model", "id": info["id"], "display_name": info.get("display_name", info["id"]),
                     "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)),
                     "lifecycle": "active"}
            if "context_window" in info:
                capabilities = anthropic_capabilities(info["features"])
                capabilities["image_input"] = {"supported": "image" in info.get("input_modalities", ())}
                entry.update(max_input_tokens=info["context_window"], max_tokens=info["max_output_tokens"],
                             capabilities=capabilities)
            return entry
        entry = {"id": info["id"], "object": "model", "created": created, "owned_by": "tinytitan"}
        for k in ("context_window", "max_output_tokens", "input_modalities", "loaded", "device"):
            if k in info:
                entry[k] = info[k]
        if "features" in info:
            entry["capabilities"] = info["features"]
        if facts["digest"]:  # what is known of the weights (models.gguf_facts)
            entry.update(parameters=facts["parameters"], quantization=facts["quantization"],
                         size_bytes=facts["size"], digest=facts["digest"])
        return entry

    async def list_models(self, call: Call) -> Reply:
        if "client_version" in call.query:  # Codex's models endpoint (codex-api ModelsClient): its catalog shape
            return Reply({"models": codex_entries(self.engine.models())})
        anthropic = self._anthropic(call)
        models = self.engine.models()
        facts = await listing_off_loop(models)
        data = [self._entry(m, anthropic, facts[m["id"]]) for m in models]
        if anthropic:
            return Reply(anthropic_page(data, call.args["limit"], call.args["after_id"], call.args["before_id"]))
        return Reply({"object": "list", "data": data})

    async def get_model(self, call: Call, model_id: str) -> Reply:
        info = self.engine.model_info(model_id)
        facts = await listing_off_loop([info])
        return Reply(self._entry(info, self._anthropic(call), facts[info["id"]]))

    async def unload_model(self, call: Call) -> Reply:
        name = self.validate(call.body, empty_is_object=True).body.get("model")
        if name is not None:
            self.engine.model_info(name)  # unknown → 404
        unloaded = await self.engine.unload(name)
        self.observer.push_state()
        # the model named, as served (``x:latest`` is ``x``); with none named, what was freed (null: nothing was)
        model = self.engine.resolve(name)[0] if name is not None else (unloaded[0] if unloaded else None)
        return Reply({"unloaded": unloaded, "model": model})

    async def load_model(self, call: Call) -> Reply:
        loaded = await self.engine.load(self.validate(call.body, empty_is_object=True).body.get("model"))
        self.observer.push_state()
        return Reply({"loaded": loaded, "model": loaded})

    async def metrics(self, call: Call) -> Reply:
        metrics = self.observer.metrics
        return Reply.of_text(metrics.exposition(), metrics.content_type)

    async def profile(self, call: Call) -> Reply:
        return Reply({"object": "list", "window": self.observer.window.maxlen, "data": self.observer.profile()})


def anthropic_page(data: list[dict], limit: int, after: str | None, before: str | None) -> dict:
    """Anthropic's page of the model list: ``limit`` models after ``after_id`` (or right before ``before_id``);
    an id that is not listed is the client's 400, naming it."""
    ids = [m["id"] for m in data]
    for name, value in (("after_id", after), ("before_id", before)):
        if value is not None and value not in ids:
            raise invalid(f"Invalid value for '{name}': no model '{value}' is listed", param=name,
                          code="invalid_value")
    start = ids.index(after) + 1 if after is not None else 0
    end = ids.index(before) if before is not None else len(ids)
    if before is not None and after is None:
        start = max(end - limit, 0)
    page = data[start:end][:limit]
    more = start + len(page) < end if before is None or after is not None else start > 0
    return {"data": page, "has_more": more, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None}

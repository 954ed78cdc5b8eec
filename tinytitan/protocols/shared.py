"""Routes every client shares: health, the model list, one model, unload, and the bare root."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..observe import dashboard
from .base import Protocol

if TYPE_CHECKING:
    from ..http.app import Server


def anthropic_capabilities(card: dict) -> dict:
    """A model card's capabilities in the shape of Anthropic's Models API: what the Messages route does
    with this model (images, documents, server tools and structured output are refused by name there)."""
    def yes(flag: bool) -> dict:
        return {"supported": bool(flag)}

    thinks = card["reasoning"]
    return {
        "batch": yes(False), "citations": yes(False), "code_execution": yes(False), "image_input": yes(False),
        "pdf_input": yes(False),
        "context_management": {"supported": False},
        "effort": {"supported": thinks, **{lvl: yes(thinks) for lvl in ("low", "medium", "high", "max")}},
        "server_tools": {"supported": False, "code_execution": yes(False), "web_search": yes(False)},
        "structured_outputs": yes(card["structured_output"]),
        "thinking": {"supported": thinks, "types": {"adaptive": yes(thinks), "enabled": yes(thinks),
                                                     "disabled": yes(True), "between_tools": yes(thinks)}},
    }


class Shared(Protocol):
    name = "shared"

    def handlers(self):
        return {"health": self.health, "root": self.root, "list_models": self.list_models,
                "get_model": self.get_model, "unload_model": self.unload_model, "metrics": self.metrics,
                "profile": self.profile, "load_model": self.load_model, "dashboard": self.dashboard,
                "dashboard_events": self.dashboard_events}

    async def health(self, server: "Server", request):
        return server.json_response(server.engine.health())

    async def root(self, server: "Server", request):
        """API clients get a status object; a browser (it prefers text/html) gets the dashboard."""
        if request.method == "GET" and request.accept_mimetypes.best_match(("application/json", "text/html")) \
                == "text/html":
            return await self.dashboard(server, request)
        return server.json_response({"name": "tinytitan", "status": "ok", "model": server.engine.model_id})

    async def dashboard(self, server: "Server", request):
        resp = server.text_response(dashboard.page(), dashboard.CONTENT_TYPE)
        resp.headers["Content-Security-Policy"] = dashboard.CSP
        resp.headers["Cache-Control"] = "no-store"
        return resp

    async def dashboard_events(self, server: "Server", request):
        return server.sse_response(dashboard.feed(server.observer))

    @staticmethod
    def _anthropic(request) -> bool:
        return "anthropic-version" in request.headers

    def _entry(self, server: "Server", info: dict, anthropic: bool) -> dict:
        created = int(info.get("created") or server.engine.started_at)
        if anthropic:
            entry = {"type": "model", "id": info["id"], "display_name": info.get("display_name", info["id"]),
                     "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))}
            if "context_window" in info:
                entry.update(max_input_tokens=info["context_window"], max_tokens=info["max_output_tokens"],
                             capabilities=anthropic_capabilities(info["features"]))
            return entry
        entry = {"id": info["id"], "object": "model", "created": created, "owned_by": "tinytitan"}
        for k in ("context_window", "max_output_tokens", "loaded", "device"):
            if k in info:
                entry[k] = info[k]
        if "features" in info:
            entry["capabilities"] = info["features"]
        return entry

    async def list_models(self, server: "Server", request):
        anthropic = self._anthropic(request)
        data = [self._entry(server, m, anthropic) for m in server.engine.models()]
        if anthropic:
            return server.json_response({"data": data, "has_more": False,
                                         "first_id": data[0]["id"] if data else None,
                                         "last_id": data[-1]["id"] if data else None})
        return server.json_response({"object": "list", "data": data})

    async def get_model(self, server: "Server", request, model_id: str):
        info = server.engine.model_info(model_id)
        return server.json_response(self._entry(server, info, self._anthropic(request)))

    async def unload_model(self, server: "Server", request):
        raw = await request.get_data()
        body = self.validator.validate(self.validator.parse_json(raw) if raw.strip() else {}).body
        name = body.get("model")
        if name is not None:
            server.engine.model_info(name)  # unknown → 404
        unloaded = await server.engine.unload(name)
        server.observer.push_state()
        return server.json_response({"unloaded": unloaded, "model": name or server.engine.model_id})

    async def load_model(self, server: "Server", request):
        raw = await request.get_data()
        body = self.validator.validate(self.validator.parse_json(raw) if raw.strip() else {}).body
        loaded = await server.engine.load(body.get("model"))
        server.observer.push_state()
        return server.json_response({"loaded": loaded, "model": loaded})

    async def metrics(self, server: "Server", request):
        metrics = server.observer.metrics
        return server.text_response(metrics.exposition(), metrics.content_type)

    async def profile(self, server: "Server", request):
        return server.json_response({"object": "list", "window": server.observer.window.maxlen,
                                     "data": server.observer.profile()})

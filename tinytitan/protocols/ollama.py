"""Ollama's API: the Python its table (spec/ollama.yaml) cannot say — model names (``name:tag``), message
shapes, the prompt of /api/generate, the model routes, and the fold of lines into one object.

Rules:
- ``name:latest`` and the bare name are the served id (the engine reads them so, on every protocol, after
  the name as given); here so is any spelling Ollama reads as that name (any case, ``library/x``,
  ``registry.ollama.ai/library/x:latest``: models/names.py); any other tag is an unknown model (404).
- A tool result names its call by ``tool_call_id`` where the client sent one, else by ``tool_name``, else it
  answers the oldest call not yet answered.
- The answer's lines (their durations, calls and log probabilities) and their fold: ollama_lines.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from datetime import datetime, timezone

from .. import images, tool_choice
from ..chat_request import ChatRequest, Message, Tool, ToolCall
from ..errors import ApiError, invalid
from ..models.gguf_facts import listing_off_loop, weights_on_gpu
from ..models.names import conflicting_source, ollama_parts, ollama_reads, ollama_spelling
from ..output_format import normalise_ollama
from ..speclang.validate import Validated
from . import keep_alive
from .base import Protocol
from .common import in_call_order, logprobs_rule, place_system
from .ollama_lines import (OllamaState, fold_ollama, on_call_done, on_call_started, on_finished,
                           on_text)
from .wire import Call, Reply

log = logging.getLogger("tinytitan.ollama")

LATEST = ":latest"
FAR_FUTURE = "2318-01-01T00:00:00Z"  # Ollama's expires_at for a model kept loaded without a deadline


def ollama_name(model_id: str) -> str:
    return model_id if ":" in model_id else model_id + LATEST


def modelfile_parameters(params: dict) -> list[str]:
    """A model's parameters as ``ollama show`` prints them: one line per value (a list gives a line per item),
    the name padded to 30 columns, the value as Go's ``%#v`` writes it (strings quoted); sorted by name."""
    lines = []
    for key in sorted(params):
        values = params[key] if isinstance(params[key], list) else [params[key]]
        lines += [f"{key:<30} {json.dumps(v, ensure_ascii=False)}"
                  for v in values]
    return lines


def iso_time(seconds: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# -- request hooks: the table checked every shape (spec schemas); these only reshape ------------------------
def parse_keep_alive(value, body: dict, args: dict, v: Validated) -> None:
    keep_alive.check(value)  # (a string Go's ParseDuration cannot read: Ollama's 400, in Go's words)


def shown_template(card: dict) -> str:
    """The template /api/show gives: the chat template, and for a model that fills in a middle, first the branch
    Ollama's own templates for such models have (``{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}…{{- else }}``):
    Continue takes a model for fill-in-the-middle only where its template says ``.Suffix``."""
    gap = card.get("fill_in")
    if not gap:
        return card["template"]
    go = gap.replace("{prefix}", "{{ .Prompt }}").replace("{suffix}", "{{ .Suffix }}")
    return f"{{{{- if .Suffix }}}}{go}{{{{- else }}}}{card['template']}{{{{- end }}}}"


def parse_model(value: str, body: dict, args: dict, v: Validated) -> None:
    args["model"] = value  # (the handler puts the served name in its place: Ollama.served)


def _answered(pending: list[ToolCall], m: dict) -> ToolCall | None:
    for key, attr in (("tool_call_id", "id"), ("tool_name", "name")):
        if m.get(key):
            match = next((c for c in pending if getattr(c, attr) == m[key]), None)
            if match is not None:
                pending.remove(match)
                return match
    return pending.pop(0) if pending and not m.get("tool_call_id") else None


def parse_messages(value: list, body: dict, args: dict, v: Validated) -> None:
    msgs: list[Message] = []
    pending: list[ToolCall] = []  # the last assistant turn's calls not answered yet, oldest first
    for i, m in enumerate(value):
        role, content = m["role"], m.get("content") or ""
        if m.get("images") and role in ("system", "assistant"):
            raise invalid(f"images in the {role} message (messages[{i}].images) are not supported: images go in user "
                          "messages and tool results", param=f"messages[{i}].images", code="unsupported_content")
        if role == "assistant":
            calls = []
            for j, c in enumerate(m.get("tool_calls") or []):
                fn = c["function"]
                arguments = fn.get("arguments", {})
                calls.append(ToolCall(c.get("id") or f"call_{i}_{j}", fn["name"],
                                      arguments if isinstance(arguments, str) else json.dumps(arguments)))
            pending = list(calls)
            msgs.append(Message("assistant", content, tool_calls=tuple(calls), reasoning=m.get("thinking") or None))
        elif role == "tool":
            call = _answered(pending, m)
            msgs.append(Message("tool", content, parts=with_images(content, m.get("images"), f"messages[{i}]"),
                                tool_call_id=call.id if call else m.get("tool_call_id") or f"call_{i}",
                                name=call.name if call else m.get("tool_name")))
        else:
            msgs.append(Message(role, content, parts=with_images(content, m.get("images"), f"messages[{i}]")))
    if msgs and msgs[-1].role == "assistant" and not msgs[-1].tool_calls:
        continue_final(msgs, body, args)
    args["messages"] = place_system([], in_call_order(msgs))


def continue_final(msgs: list[Message], body: dict, args: dict) -> None:
    """A final assistant message without calls is continued (a prefill, as Ollama's templates leave that turn
    open): the answer is what follows its text. One without text begins nothing and is left out."""
    if not msgs[-1].content:
        if len(msgs) > 1:
            msgs.pop()
        return
    for param, refused in (("format", body.get("format") not in (None, "")),
                           ("tool_choice", tool_choice.forces(body.get("tool_choice")))):
        if refused:
            raise invalid(f"A final assistant message (messages[{len(body['messages']) - 1}]) cannot be continued "
                          f"under '{param}': its grammar starts where the answer starts", param=param,
                          code="unsupported_prefill")
    args["continue_final"] = True
    args["final_where"] = f"messages[{len(body['messages']) - 1}]"


def with_images(text: str, given: list | None, where: str) -> tuple:
    """A turn's ``images`` (base64, no media type: the bytes say it) ahead of its text, as Ollama's templates place
    them; () without images. Only user turns (and tool results) carry them. Some clients send an image URL as it
    came to them (LangChain's ChatOllama passes any but a data URL on as is): a data URL is taken too, and a remote
    one is refused by name as on the other routes (or was fetched, where the server fetches them)."""
    if not given:
        return ()
    field = f"{where}.images" if where else "images"
    parts = tuple(images.from_url(data, f"{field}[{j}]")
                  if data.lstrip()[:5].lower() == "data:" or images.is_remote(data)
                  else images.from_base64(data, "", f"{field}[{j}]") for j, data in enumerate(given))
    return parts + ((text,) if text else ())


def parse_tools(value: list, body: dict, args: dict, v: Validated) -> None:
    args["tools"] = [Tool(t["function"]["name"], t["function"].get("description") or "",
                          t["function"].get("parameters") or {"type": "object", "properties": {}}) for t in value]


def parse_tool_choice(value, body: dict, args: dict, v: Validated) -> None:
    args["tool_choice"], args["tool_names"] = tool_choice.openai(value)


def parse_format(value, body: dict, args: dict, v: Validated) -> None:
    args["grammar"] = normalise_ollama(value)


def parse_prompt(value: str, body: dict, args: dict, v: Validated) -> None:
    """/api/generate: a raw prompt (or a fill-in-the-middle pair) goes to the model as written; otherwise the
    prompt is one user turn under the optional system text, rendered by the model's chat template."""
    if body.get("raw") and body.get("system"):  # as Ollama refuses it: the raw prompt is all the model reads
        raise invalid("'system' is not supported with 'raw': true (raw mode does not support template, system, or "
                      "context): put the system text in the rendered prompt", param="system",
                      code="unsupported_parameter")
    if body.get("raw") or body.get("suffix"):  # an empty suffix is none (Ollama's Go client sends "" always)
        if body.get("images"):
            raise invalid("'images' with a raw prompt (or a suffix) are not supported: send them with a templated "
                          "prompt, or to /api/chat", param="images", code="unsupported_content")
        args["prompt"] = value
        if body.get("suffix"):
            args["suffix"] = body["suffix"]
        return
    system = body.get("system")
    args["messages"] = ([Message("system", system)] if system else []) + [
        Message("user", value, parts=with_images(value, body.get("images"), ""))]


# -- machine hooks: the timings and the call a line carries -------------------------------------------------
class Ollama(Protocol):
    name = "ollama"

    def request_hooks(self):
        return {"model": parse_model, "messages": parse_messages, "tools": parse_tools, "prompt": parse_prompt,
                "format": parse_format, "tool_choice": parse_tool_choice, "keep_alive": parse_keep_alive,
                "logprobs": logprobs_rule(None)}  # (top_logprobs alone: none, as Ollama's runner)

    def machine_hooks(self):
        return {"finished": on_finished, "call_started": on_call_started,
                "tool_call": on_call_done, "text": on_text}

    def machine_state(self) -> OllamaState:
        return OllamaState()

    def folds(self):
        return {"ollama": fold_ollama}

    def handlers(self):
        return {"chat": self.chat, "complete": self.complete, "tags": self.tags, "show": self.show,
                "ps": self.ps, "version": self.version, "unsupported": self.unsupported}

    def extra_context(self, v: Validated) -> dict:
        named = {"model": v.body["model"]} if "model" in v.body else {}  # answered under the name as sent
        return {**named, "now": iso_time}

    def chat_request(self, v: Validated) -> ChatRequest:
        req = super().chat_request(v)
        if req.max_tokens is not None and req.max_tokens <= 0:  # -1 and 0 (the runner's): no cap; -2: the context
            req = req.with_(max_tokens=None)
        if req.seed == -1:  # Ollama seeds its sampler only where seed != -1 (sample/samplers.go): -1 is no seed
            req = req.with_(seed=None)
        drafts = (v.body.get("options") or {}).get("draft_num_predict")
        if drafts is not None and drafts <= 0:  # Ollama drafts only where it is above 0 ("0 to disable")
            req = req.with_(speculative=False)
        return req

    def served(self, name: str) -> str:
        """The name the engine serves that ``name`` means as Ollama reads model names (``names.ollama_spelling``:
        any case, ``library/x``, ``registry.ollama.ai/library/x:latest``); ``name`` itself where the engine serves it
        as sent, or where it means nothing served (its 404 then names it as sent). A name Ollama cannot read as
        one is its 400, as Ollama's handlers answer before they look for the model."""
        try:
            self.engine.resolve(name)
            return name
        except ApiError:
            if conflicting_source(name):  # (Ollama's ParseRef error, the name quoted as Go's %q does)
                raise invalid(f"use either :local or :cloud, not both: {json.dumps(name.strip(), ensure_ascii=False)}",
                              param="model", code="invalid_value") from None
            if not ollama_reads(name):
                raise invalid("invalid model name", param="model", code="invalid_value") from None
            return ollama_spelling(name, [m["id"] for m in self.engine.models()]) or name

    # -- routes --------------------------------------------------------------------------------------------
    async def chat(self, call: Call) -> Reply:
        v = await self.checked(call, handler="chat")
        if not v.body["model"].strip():  # Ollama's ChatHandler's words (its GenerateHandler's: the model '' not found)
            raise invalid("model is required", param="model", code="missing_required_parameter")
        v.args["model"] = self.served(v.body["model"])
        self._refuse_what_the_model_lacks(v)
        if not v.body.get("messages"):  # none, null or []: `ollama run` / `ollama.chat(model)` loading it
            return await self._loaded(v, message={"role": "assistant", "content": ""})
        return await self.respond(v, self.engine.apply_model(self.chat_request(v)))

    async def complete(self, call: Call) -> Reply:
        v = await self.checked(call, handler="complete")
        v.args["model"] = self.served(v.body["model"])
        self._refuse_what_the_model_lacks(v)
        if not v.body.get("prompt") and not v.body.get("suffix"):
            return await self._loaded(v, response="")
        return await self.respond(v, self.engine.apply_model(self.chat_request(v)), entry="generate")

    def wording_data(self, err: ApiError) -> dict:
        """``{name}``: the model an error names, spelled as Ollama's own errors spell it (its full name,
        ``registry.ollama.ai/library/x:latest``, in the case it was sent: ParseName keeps it)."""
        model = err.data.get("model")
        parts = ollama_parts(model, cased=True) if isinstance(model, str) else None
        return {"name": f"{parts[0]}/{parts[1]}/{parts[2]}:{parts[3]}" if parts else model} if model else {}

    def _refuse_what_the_model_lacks(self, v: Validated) -> None:
        """A field asking for what the model's card lacks (the spec's ``extra.needs_capability``: ``think`` of a
        model that does not think, a ``suffix`` to one without fill-in-the-middle) is refused in Ollama's words, as
        its handlers refuse it before they load the model or read the prompt: clients match them (``ollama run``
        asks again without ``think``; an editor tells "does not support insert" from a failed completion). A field
        sent as null, false or empty asks for nothing; an unknown model is its 404 first. The model is named as the
        client spelled it (Ollama's ParseName keeps its case; the engine's own refusal would name the served one)."""
        asked = [need for need in self.spec.extra.get("needs_capability", ()) if v.body.get(need["field"])]
        if not asked:
            return
        capabilities = self.engine.model_card(v.args["model"])["capabilities"]  # (the card once, however many ask)
        for need in asked:
            if need["capability"] not in capabilities:
                data = {"model": v.body["model"], "check": need["check"]} if "check" in need else None
                raise invalid(need["message"].format(model=json.dumps(v.body["model"])), param=need["field"],
                              code=need.get("code"), data=data)

    async def _loaded(self, v: Validated, **answer) -> Reply:
        """Ollama's way to load a model: a request with nothing to continue makes the model resident (as
        Ollama schedules its runner before it reads the prompt) and answers, nothing generated
        (``done_reason: load``; the model stays resident whatever ``keep_alive`` says, so never ``unload``)."""
        info = self.engine.model_info(v.args["model"])  # (an unknown model: its 404 first)
        if not info["loaded"] and not keep_alive.lets_go(v.body.get("keep_alive")):  # (keep_alive 0: `ollama stop`)
            await self.engine.load(v.args["model"])  # waits for the generations in flight, as a switch does
        return Reply({"model": v.body["model"], "created_at": iso_time(), **answer, "done": True,
                      "done_reason": "load"})

    def _entry(self, card: dict, facts: dict) -> dict:
        """What ``/api/tags`` lists: for a model of an Ollama library, its manifest's digest, size and time and
        its config's details, as Ollama lists them; for another, its weights' own (``models.gguf_facts``)."""
        name = ollama_name(card["id"])
        own = facts["ollama"] or {}
        digest = own.get("digest") or facts["digest"].removeprefix("sha256:") or \
            hashlib.sha256(card["id"].encode()).hexdigest()  # (a backend without weight files)
        return {"name": name, "model": name, "modified_at": self._modified_at(card, facts),
                "size": int(own.get("size") or facts["size"]), "digest": digest,
                "details": self._details(card, facts)}

    def _modified_at(self, card: dict, facts: dict) -> str:
        """A model's time, the same in /api/tags and /api/show (as Ollama gives its manifest's in both): a
        library model's manifest's, else the server's start."""
        own = facts["ollama"] or {}
        return iso_time(own.get("modified_at") or card.get("created") or self.engine.started_at)

    def _details(self, card: dict, facts: dict) -> dict:
        """A family is the weights' architecture (Ollama's from GGUF ``general.architecture``), not the call syntax."""
        if facts["ollama"]:
            return {"parent_model": "", **facts["ollama"]["details"]}
        family = card["architecture"]
        return {"parent_model": "", "format": facts["format"] or self.spec.extra["format"], "family": family,
                "families": [family], "parameter_size": facts["parameter_size"],
                "quantization_level": facts["quantization"]}

    async def tags(self, call: Call) -> Reply:
        cards = [self.engine.model_card(m["id"]) for m in self.engine.models()]
        facts = await listing_off_loop(cards)
        entries = sorted((self._entry(c, facts[c["id"]]) for c in cards), key=lambda e: e["modified_at"],
                         reverse=True)
        return Reply({"models": entries})  # newest first, as Ollama lists them

    async def ps(self, call: Call) -> Reply:
        """Loaded models: ``size`` the bytes of their weights in memory, ``size_vram`` those in GPU memory."""
        cards = [self.engine.model_card(m["id"]) for m in self.engine.models() if m.get("loaded")]
        gpu = weights_on_gpu()
        facts = await listing_off_loop(cards)
        out = []
        for c in cards:
            entry = {k: v for k, v in self._entry(c, facts[c["id"]]).items() if k != "modified_at"}  # not Ollama's
            resident = facts[c["id"]]["resident"] or entry["size"]
            out.append({**entry, "size": resident, "expires_at": FAR_FUTURE, "size_vram": resident if gpu else 0,
                        "context_length": c["context_window"]})
        return Reply({"models": out})

    async def show(self, call: Call) -> Reply:
        v = await self.checked(call, handler="show")
        name = v.body.get("model") or v.body.get("name") or ""
        if not name.strip():  # Ollama's ShowHandler's words
            raise invalid("model is required", param="model", code="missing_required_parameter")
        card = self.engine.model_card(self.served(name))
        arch = card["architecture"]
        facts = (await listing_off_loop([card]))[card["id"]]
        own = facts["ollama"] or {}
        params = modelfile_parameters(own.get("params") or ({"stop": card["stop"]} if card.get("stop") else {}))
        system = v.body.get("system") or card.get("system")  # a system prompt sent replaces the default, as in Ollama
        modelfile = f"FROM {card['id']}\n" + "".join(f"PARAMETER {line}\n" for line in params) + (
            f'SYSTEM """{system}"""\n' if system else "")
        return Reply({
            "modelfile": modelfile, "parameters": "\n".join(params), "template": shown_template(card),
            **({"system": system} if system else {}),  # omitted when empty, as Ollama omits it
            "details": self._details(card, facts), "capabilities": card["capabilities"],
            "model_info": {"general.architecture": arch, f"{arch}.context_length": card["context_window"]},
            "modified_at": self._modified_at(card, facts)})

    async def version(self, call: Call) -> Reply:
        return Reply({"version": self.spec.extra["version"]})

    async def unsupported(self, call: Call, **_path_args) -> Reply:
        raise ApiError("not_implemented", f"{call.method} {call.path} is not supported: this server serves the "
                       "MLX models it was started with (no pulling, pushing, creating, copying or deleting) and "
                       "has no embeddings", code="not_implemented")

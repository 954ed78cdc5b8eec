"""Tools declared where a tool reference loads them (Anthropic's tool search, Responses' client-executed
tool_search): a deferred tool stays out of the prompt's tool header, and its definition is rendered, in the family's
own tool-declaration form, inside the tool result that loads it — so loading a tool only appends to the prompt."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace

from ...chat_request import ChatRequest, Tool
from ...errors import invalid
from ..families import template_source
from .messages import template_tool

log = logging.getLogger("tinytitan.backend")


class ToolDeclarations:
    """A part of prompt preparation (``prepare.py``): deferred tools and the tool results that load them."""

    def with_tool_declarations(self, req: ChatRequest) -> ChatRequest:
        """Tool messages that reference tools (``tool_references``: a tool search's result) carry the referenced
        tools' definitions, each in the family's own declaration form, after their text. A reference to a tool
        the request does not offer is the client's 400."""
        if not any(m.tool_references for m in req.messages):
            return req
        offered = {t.name: t for t in req.tools}
        out = []
        for i, m in enumerate(req.messages):
            if not m.tool_references:
                out.append(m)
                continue
            missing = [n for n in m.tool_references if n not in offered]
            if missing:
                raise invalid(f"messages[{i}] references the tool '{missing[0]}', which is not among the tools "
                              f"offered", param="tools", code="invalid_value")
            text = "\n".join(self.tool_declaration(offered[n]) for n in m.tool_references)
            # (a result with an image is rendered from its parts: the declarations close them too)
            parts = (*m.parts, f"\n{text}") if m.parts else ()
            out.append(replace(m, content=f"{m.content}\n{text}" if m.content else text, parts=parts,
                               tool_references=()))
        return req.with_(messages=tuple(out))

    def tool_declaration(self, tool: Tool) -> str:
        """One tool's definition as this model's template declares tools in its header: the text rendering a
        probe tool and this one adds over rendering the probe alone (the header's own line for it, e.g. Qwen's
        ``{"type": "function", "function": …}``). A template that declares no tools: the definition as JSON."""
        key = json.dumps(template_tool(tool))  # (keys in their order: the declaration writes them so)
        cache = self.__dict__.setdefault("_declarations", {})
        if key in cache:
            return cache[key]
        probe = template_tool(Tool("tinytitan_probe", "", {"type": "object", "properties": {}}))
        source = template_source(self.tokenizer)
        msgs = [{"role": "user", "content": "?"}]

        def header(tools: list[dict]) -> str:
            m, t = self.family.map_roles([dict(x) for x in msgs], tools, source)
            return self.tokenizer.apply_chat_template(m, tools=t, add_generation_prompt=True, tokenize=False)

        one, two = header([probe]), header([probe, template_tool(tool)])
        p = len(os.path.commonprefix([one, two]))
        s = len(os.path.commonprefix([one[p:][::-1], two[p:][::-1]]))
        text = two[p:len(two) - s].strip()
        if not text or tool.name not in text:
            text = json.dumps(template_tool(tool), ensure_ascii=False)
        if len(cache) >= 512:
            cache.pop(next(iter(cache)))
        cache[key] = text
        return text

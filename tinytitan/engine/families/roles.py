"""Role mapping: the message dicts a chat template gets, in the roles and shapes it accepts.

A ChatRequest has system / user / assistant / tool turns; templates differ in what they accept. What each
template can take is read from its source (and the family's conventions fill in the rest):

- no ``tool`` role (Gemma): tool results become user turns written the family's way
  (```` ```tool_output ```` for Gemma, ``<tool_response>`` blocks otherwise), and earlier calls are written into
  the assistant text the way the model writes them (```` ```tool_code ````);
- no ``tools`` variable: the tool list is written into the system text the family's way;
- no system role, strict alternation (Gemma, Mistral), or a system turn only at the start (Qwen3.5): every system
  text after the first turn becomes a user turn, the first system text is merged into the first user turn where the template rejects system turns, and
  consecutive turns of one role are merged;
- where alternation is checked on all but the tool traffic (Mistral), a user turn right after tool results is
  added to the last result;
- Mistral's templates accept only 9-character alphanumeric tool-call ids: ids are mapped, consistently;
- a template that takes one tool call per assistant turn (Llama 3.1, gpt-oss) gets a turn per call.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass

_TOOL_ROLE = re.compile(r"""['"](tool|ipython|observation|tool_results?)['"]""")
_TOOLS_VAR = re.compile(r"\btools\b")
_NO_SYSTEM = re.compile(r"system role (is )?not supported", re.I)
_ALTERNATE = re.compile(r"must alternate|roles must alternate", re.I)
_SINGLE_CALL = re.compile(r"only supports single tool.?calls|max(imum)? (of )?1 tool call per message", re.I)
_SYSTEM_FIRST = re.compile(r"system message.{0,40}(at the beginning|must be first)|only one system message", re.I)


@dataclass(frozen=True)
class TemplateRoles:
    tool_role: bool
    tool_calls: bool
    tools: bool
    system: bool
    alternate: bool
    single_call: bool
    system_first_only: bool  # a system turn anywhere but first is refused (Qwen3.5)

    @classmethod
    @functools.lru_cache(maxsize=32)
    def of(cls, source: str | None, family: "RoleConventions") -> "TemplateRoles":
        """What a template takes, read from its source once (six searches of a source of several kilobytes:
        every request would pay them)."""
        src = source or ""
        return cls(
            tool_role=bool(_TOOL_ROLE.search(src)) if src else True,
            tool_calls="tool_calls" in src if src else True,
            tools=bool(_TOOLS_VAR.search(src)) if src else True,
            system=not (_NO_SYSTEM.search(src) or family.merge_system),
            alternate=bool(_ALTERNATE.search(src)) or family.alternate,
            single_call=bool(_SINGLE_CALL.search(src)) or family.single_call,
            system_first_only=bool(_SYSTEM_FIRST.search(src)) or family.system_first_only,
        )


@dataclass(frozen=True)
class RoleConventions:
    """How a family writes what its template may not: tool results, calls, the tool list."""

    result_style: str = "tool_response"  # tool_response | tool_output
    call_style: str = "json"  # json | pythonic
    merge_system: bool = False  # fold the system text into the first user turn even if the template takes it
    alternate: bool = False
    short_ids: bool = False  # Mistral: 9-character alphanumeric call ids
    single_call: bool = False  # one call per assistant turn (gpt-oss renders only the first)
    system_first_only: bool = False  # later system turns are dropped or refused by the template


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p if isinstance(p, str) else p.get("text", "") for p in content
                       if isinstance(p, str) or (isinstance(p, dict) and p.get("type") == "text"))
    return str(content)


def _has_images(content) -> bool:
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "image" for p in content)


def _parts(content) -> list:
    """Content as template parts (an image part kept where it is)."""
    if _has_images(content):
        return [{"type": "text", "text": p} if isinstance(p, str) else p for p in content]
    text = _text(content)
    return [{"type": "text", "text": text}] if text else []


def _joined(a, b, sep: str = "\n\n"):
    """Two contents one after the other, ``sep`` between them: text, or parts where either holds an image (a
    vision model's; its images stay where they were)."""
    if not (_has_images(a) or _has_images(b)):
        text_a, text_b = _text(a), _text(b)
        return text_a + (sep if text_a and text_b else "") + text_b
    parts_a, parts_b = _parts(a), _parts(b)
    out = list(parts_a)
    # text beside text is one part: a template may trim each text part (Gemma 3's), which would take the line
    # breaks of a wrapper or a separator standing alone
    for part in ([{"type": "text", "text": sep}] if parts_a and parts_b else []) + parts_b:
        if out and part.get("type") == "text" and out[-1].get("type") == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + part["text"]}
        else:
            out.append(part)
    return out


def _py_literal(value) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def render_call(call: dict, style: str) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    if style == "pythonic":
        if isinstance(args, dict):
            inner = ", ".join(f"{k}={_py_literal(v)}" for k, v in args.items())
        else:
            inner = str(args)
        return f"```tool_code\n{fn['name']}({inner})\n```"
    body = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def render_result(message: dict, style: str):
    if _has_images(message.get("content")):  # a result with images (a screenshot read): parts, wrapped alike
        head, tail = ("```tool_output\n", "\n```") if style == "tool_output" else ("<tool_response>\n",
                                                                                  "\n</tool_response>")
        return _joined(_joined(head, message["content"], ""), tail, "")
    content = _text(message.get("content"))
    if style == "tool_output":
        return f"```tool_output\n{content}\n```"
    return f"<tool_response>\n{content}\n</tool_response>"


def tools_preamble(tools: list[dict], style: str, example: str | None = None) -> str:
    """The tool list written into the system text (a template without ``tools``); ``example``: a call as the
    family's syntax writes it."""
    listing = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    if style == "pythonic":
        return ("You have access to functions. If you decide to invoke any of the function(s), you MUST put it "
                "in the format of\n```tool_code\nfunc_name(param_name=value, ...)\n```\n"
                "You SHOULD NOT include any other text in the response if you call a function\n" + listing)
    if example is not None:
        return ("You may call functions. Write each call exactly like this:\n" + example
                + "\nAvailable functions:\n" + listing)
    return ("You may call functions. For each call, return a JSON object with the function name and arguments "
            "within <tool_call></tool_call> tags. Available functions:\n" + listing)


def short_id(call_id: str) -> str:
    """A 9-character alphanumeric id standing for call_id (the same every time)."""
    if len(call_id) == 9 and call_id.isalnum():
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()
    return digest[:9]


def map_roles(messages: list[dict], tools: list[dict] | None, template_source: str | None,
              conventions: RoleConventions, render=None) -> tuple[list[dict], list[dict] | None]:
    """The messages (and tools) to render, in what the template takes. Inputs are not modified. ``render``:
    the family's syntax writing past calls ``[(name, arguments)]`` as the model writes them (else
    ``render_call`` in the conventions' style)."""
    roles = TemplateRoles.of(template_source, conventions)
    msgs = [dict(m) for m in messages]

    if tools and not roles.tools:
        example = render([("function_name", {"parameter": "value"})]) if render is not None else None
        preamble = tools_preamble(tools, conventions.call_style, example)
        if msgs and msgs[0]["role"] == "system":
            msgs[0]["content"] = _text(msgs[0].get("content")) + "\n\n" + preamble
        else:
            msgs.insert(0, {"role": "system", "content": preamble})
        tools = None

    if conventions.short_ids:
        for m in msgs:
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": short_id(c["id"])} if c.get("id") else c for c in m["tool_calls"]]
            if m["role"] == "tool" and m.get("tool_call_id"):
                m["tool_call_id"] = short_id(m["tool_call_id"])

    if not roles.tool_calls:
        for m in msgs:
            if m["role"] == "assistant" and m.get("tool_calls"):
                calls = m.pop("tool_calls")
                if render is not None:
                    calls = render([(c.get("function", c)["name"], c.get("function", c).get("arguments", {}))
                                    for c in calls])
                else:
                    calls = "\n".join(render_call(c, conventions.call_style) for c in calls)
                text = _text(m.get("content"))
                m["content"] = (text + "\n" if text else "") + calls
    if not roles.tool_role:
        for m in msgs:
            if m["role"] == "tool":
                m["content"] = render_result(m, conventions.result_style)
                m["role"] = "user"
                m.pop("tool_call_id", None)
                m.pop("name", None)

    if roles.single_call:
        msgs = _one_call_per_turn(msgs)

    if not roles.system or roles.alternate or roles.system_first_only:
        for i, m in enumerate(msgs):
            if m["role"] == "system" and (i > 0 or not roles.system):
                m["role"] = "user"
        msgs = _merge_runs(msgs)
    if roles.alternate:
        lead = 1 if msgs and msgs[0]["role"] == "system" else 0
        if lead == len(msgs) or msgs[lead]["role"] != "user":
            # the turns must open with a user turn, which also carries the system text (Gemma's): a conversation
            # of a system message alone, or one opening with the assistant (a greeting), gets an empty one
            msgs.insert(lead, {"role": "user", "content": ""})
    if roles.alternate and roles.tool_role:
        msgs = _fold_user_after_results(msgs)
    return msgs, tools


def _one_call_per_turn(msgs: list[dict]) -> list[dict]:
    """An assistant turn with several calls becomes a turn per call, each followed by its own results (matched
    by call id): such a template names a result after the call just before it (harmony's), so the results of
    parallel calls left after the last call would all be that call's. Results that cannot all be matched keep
    their order, after the last call."""
    out: list[dict] = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        calls = m.get("tool_calls") or []
        if m["role"] != "assistant" or len(calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(msgs) and msgs[j]["role"] == "tool":
            j += 1
        results = msgs[i + 1:j]
        ids = [c.get("id") for c in calls]
        matched = len(set(ids)) == len(ids) and all(r.get("tool_call_id") in ids for r in results)
        for k, c in enumerate(calls):
            out.append({**m, "tool_calls": [c]} if k == 0 else {"role": "assistant", "content": "", "tool_calls": [c]})
            if matched:
                out.extend(r for r in results if r.get("tool_call_id") == c.get("id"))
        if not matched:
            out.extend(results)
        i = j
    return out


def _merge_runs(msgs: list[dict]) -> list[dict]:
    out: list[dict] = []
    for m in msgs:
        prev = out[-1] if out else None
        calls = prev is not None and (prev.get("tool_calls") or m.get("tool_calls"))
        if prev is not None and prev["role"] == m["role"] and m["role"] in ("user", "assistant", "system") \
                and not calls:  # turns split one call each stay split
            merged = dict(prev)
            merged["content"] = _joined(prev.get("content"), m.get("content"))
            if merged.get("name") != m.get("name"):  # turns of two participants joined: neither's name
                merged.pop("name", None)
            out[-1] = merged
        else:
            out.append(m)
    return out


def _fold_user_after_results(msgs: list[dict]) -> list[dict]:
    """Strict templates check alternation on the turns other than tool traffic (tool results, assistant
    turns that only call tools): a user turn right after tool results would follow the user turn before
    the calls. Its text is added to the last tool result instead."""
    out: list[dict] = []
    last_visible = None
    last_tool: int | None = None
    for m in msgs:
        if m["role"] == "tool":
            last_tool = len(out)
            out.append(m)
            continue
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append(m)
            continue
        if m["role"] == "user" and last_visible == "user" and last_tool is not None:
            tool = dict(out[last_tool])
            if _has_images(tool.get("content")) or _has_images(m.get("content")):
                tool["content"] = _joined(tool.get("content"), m.get("content"))
            else:
                tool["content"] = _text(tool.get("content")) + "\n\n" + _text(m.get("content"))
            out[last_tool] = tool
            continue
        if m["role"] in ("user", "assistant"):
            last_visible = m["role"]
            last_tool = None
        out.append(m)
    return out

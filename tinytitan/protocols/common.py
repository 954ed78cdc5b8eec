"""Normalisations several protocols share (kept out of the tables because they reshape messages)."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass
from typing import Callable

from ..chat_request import RENDERER_ARGUMENTS, ImagePart, Message
from ..errors import invalid
from ..speclang.json_text import strict_loads, without_lone_surrogates

log = logging.getLogger("tinytitan.protocols")

REMINDER = "<system-reminder>\n{}\n</system-reminder>"


def text_of(content, where: str, part_text_keys: dict[str, str] | None = None, skip: frozenset = frozenset()) -> str:
    """A content value that is a string, null, or a list of text parts → one string. ``part_text_keys``:
    the part types taken, each with the key its text is under (default: ``text`` parts); ``skip``: part types
    that are not text and are read elsewhere (their places still count in ``where[j]``)."""
    part_text_keys = part_text_keys or {"text": "text"}
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = [_part_text(part, f"{where}[{j}]", part_text_keys) for j, part in enumerate(content)
               if not (isinstance(part, dict) and part.get("type") in skip)]
        return "".join(out) if len(out) <= 1 else "\n".join(out)
    raise invalid(f"Invalid type for '{where}': expected a string or an array of content parts", param=where,
                  code="invalid_type")


def _part_text(part, where: str, part_text_keys: dict[str, str]) -> str:
    if not isinstance(part, dict):
        raise invalid(f"Invalid content part at {where}: expected an object", param=where)
    key = part_text_keys.get(part.get("type"))
    if key is None:
        raise invalid(f"content part type '{part.get('type')}' at {where} is not supported: text only",
                      param=f"{where}.type", code="unsupported_content")
    text = part.get(key)
    if not isinstance(text, str):
        raise invalid(f"Missing or invalid '{key}' in content part {where}", param=f"{where}.{key}")
    return text


def parse_logit_bias(value: dict, body: dict, args: dict, v) -> None:
    """OpenAI's ``logit_bias``: token ids (as strings) → a bias from -100 to 100, added to the logit (the engine
    refuses an id past the model's vocabulary)."""
    pairs = []
    for key, bias in value.items():
        if not (key.isascii() and key.isdigit()):
            raise invalid(f"Invalid key in 'logit_bias': {key}. You should only be submitting non-negative integers.",
                          param="logit_bias", code="invalid_value")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise invalid(f"Invalid value for 'logit_bias': {json.dumps(bias)[:40]} for token {key} is not a number "
                          "from -100 to 100", param="logit_bias", code="invalid_value")
        pairs.append((int(key), float(bias)))
    args["logit_bias"] = tuple(sorted(pairs))


def content_of(content, where: str, images: dict[str, Callable[[dict, str], ImagePart]],
               part_text_keys: dict[str, str] | None = None, skip: frozenset = frozenset()) -> tuple[str, tuple]:
    """``text_of`` for content that may hold images: (its text, its parts in order — text and ImagePart —
    or () when it holds no image). ``images``: the part types that are images, each with the reader that
    turns one (and its place, ``where[j]``) into an ImagePart (tinytitan/images.py)."""
    if not isinstance(content, list) or not any(isinstance(p, dict) and p.get("type") in images for p in content):
        return text_of(content, where, part_text_keys, skip), ()
    keys = part_text_keys or {"text": "text"}
    texts: list[str] = []
    parts: list = []
    for j, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") in skip:
            continue
        read = images.get(part.get("type")) if isinstance(part, dict) else None
        if read is not None:
            parts.append(read(part, f"{where}[{j}]"))
            continue
        text = _part_text(part, f"{where}[{j}]", keys)
        texts.append(text)
        parts.append(text)
    return ("".join(texts) if len(texts) <= 1 else "\n".join(texts)), tuple(parts)


def place_system(system_texts: list[str], messages: list[Message], merge_later: bool = False) -> list[Message]:
    """One leading system message (instructions, leading system/developer turns joined). A system turn that
    arrives later in the conversation stays in place as a user turn wrapped in <system-reminder>, so the
    prompt ahead of it — and its cached prefix — stays as it was; with ``merge_later`` (the Responses API's
    rule: every system/developer item joins the one system message) it joins the leading message too."""
    lead = [t for t in system_texts if t]
    names: set = {None} if lead else set()  # the joined message keeps a name all its parts share
    out: list[Message] = []
    seen_other = False
    for m in messages:
        if m.role == "system":
            if not seen_other or merge_later:
                if m.content:
                    lead.append(m.content)
                    names.add(m.name)
            else:
                out.append(Message("user", REMINDER.format(m.content)))
            continue
        seen_other = True
        out.append(m)
    if lead:
        out.insert(0, Message("system", "\n\n".join(lead), name=names.pop() if len(names) == 1 else None))
    return out


def in_call_order(msgs: list[Message]) -> list[Message]:
    """Each run of tool results in the order of the calls they answer. The API pairs a result with its call by
    id, so a client may send them as its calls finish; most templates write results without ids (Qwen's
    ``<tool_response>``), and the model pairs them by position. A result whose id the turn before did not call
    keeps its place after those that it did. Every protocol's messages pass here (Chat's tool messages, Messages'
    tool_result blocks, Responses' function_call_output items, Ollama's tool turns)."""
    out: list[Message] = []
    order: dict[str, int] = {}  # the call ids of the assistant turn the run answers, by position
    run: list[Message] = []
    for m in [*msgs, None]:
        if m is not None and m.role == "tool":
            run.append(m)
            continue
        out += sorted(run, key=lambda r: order.get(r.tool_call_id, len(order)))  # (stable: ties keep their order)
        run = []
        if m is not None:
            out.append(m)
            order = {c.id: j for j, c in enumerate(m.tool_calls)}
    return out


# OpenAI's ``verbosity`` (Chat) / ``text.verbosity`` (Responses): an instruction the model reads, the last
# sentence of its system message; medium (the API's default) adds nothing
VERBOSITY = {"low": "Be concise: answer as briefly as the question allows, without preamble or recap.",
             "high": "Be thorough: answer in detail, explaining your reasoning and covering edge cases."}


def verbosity_note(level: str | None) -> str:
    """The instruction for ``level`` (``ChatRequest.system_note``: it closes the system prompt the model reads,
    the request's own or the model's default); "" for medium or none."""
    return VERBOSITY.get(level or "", "")


def template_variables(value: dict, field: str, skip: tuple[str, ...] = ()) -> dict:
    """A client's chat-template variables (``chat_template_kwargs``, ``template_vars``): passed to the template
    as they are, except ``skip`` (read elsewhere); a name the renderer sets itself is refused by name."""
    for name in value:
        if name in RENDERER_ARGUMENTS:
            raise invalid(f"'{field}.{name}' cannot be set: the server renders '{name}' itself",
                          param=f"{field}.{name}", code="invalid_value")
    return {k: x for k, x in value.items() if k not in skip}


def arguments_object(text: str, name: str | None, complete: bool = True) -> dict:
    """A call's arguments text as the JSON object Messages' ``input`` and Ollama's ``arguments`` must be: empty
    text is ``{}``; text that is not one object (cut short, or not JSON: NaN, Infinity or 1e400 included, which
    json.loads reads and json.dumps writes back bare) is ``{}`` too, and logged — never the
    arguments themselves, which are answer text no log holds. A lone surrogate becomes U+FFFD, as in requests
    (re-encoded, it is JSON strict parsers refuse)."""
    try:
        value = (strict_loads(text) if text.strip() else {}) if complete else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        log.warning("tool call %s: arguments are not a complete JSON object (%d characters); sent as {}", name,
                    len(text))
        return {}
    return without_lone_surrogates(value)


# -- a thought carried by the client (Responses' encrypted_content, Messages' signature) -----------------------
REASONING_PAYLOAD = "tinytitan-reasoning/1"


def reasoning_payload(text: str) -> str:
    """A thought carried opaquely to the client and back: a Responses reasoning item's ``encrypted_content``, a
    Messages thinking block's signature where the display omits the thought (not encrypted: base64 of JSON;
    nothing here is secret from the client that holds the answer)."""
    return base64.b64encode(json.dumps({"v": REASONING_PAYLOAD, "text": text}, ensure_ascii=False).encode()).decode()


def thought_of(payload) -> str:
    """The thought ``reasoning_payload`` carries; "" for any other value (another server's is opaque)."""
    if not isinstance(payload, str) or not payload:
        return ""
    try:
        value = json.loads(base64.b64decode(payload.encode(), validate=True).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):  # (JSON nested past the parser: not ours)
        return ""
    ok = isinstance(value, dict) and value.get("v") == REASONING_PAYLOAD and isinstance(value.get("text"), str)
    return value["text"] if ok else ""


# what joins two runs of an answer's text that a call stands between, where a protocol gives the text as one string
RUN_BREAK = "\n\n"


@dataclass
class TextRuns:
    """A stream that gives an answer's text as one string (Chat's ``content``, Ollama's) joins the runs a call
    stands between with a paragraph break (``lead``, what the text going out begins with): the parser cut the
    layout around the call's markup, and "Let me check." + call + "Done." must not read "Let me check.Done."."""

    said: bool = False    # text has gone out
    called: bool = False  # a call opened since
    lead: str = ""

    def text(self) -> None:
        self.lead = RUN_BREAK if self.said and self.called else ""
        self.said, self.called = True, False


def logprobs_rule(top_alone: str | None):
    """The rule over ``logprobs`` (true asks for each answer token's log probability) and ``top_logprobs`` (that
    many alternatives too): ``top_alone``, the API's words refusing ``top_logprobs`` without ``logprobs`` (None:
    it asks nothing, as Ollama; 0 asks nothing anywhere)."""
    def rule(body: dict, args: dict, v) -> None:
        top = body.get("top_logprobs")
        if body.get("logprobs") is True:
            args["logprobs"] = top or 0
        elif top and top_alone is not None:
            raise invalid(top_alone, param="top_logprobs")
    return rule


def token_logprobs(ev, bare: bool = False) -> list[dict]:
    """A text delta's tokens' log probabilities as OpenAI writes each (``ChatCompletionTokenLogprob``; Responses'
    ``Logprob`` and Ollama's are the same shape): token, bytes, logprob, and the likeliest alternatives (``bare``:
    an empty list left out, as Ollama's ``omitempty``)."""
    def one(lp, top: bool) -> dict:
        out = {"token": lp.token, "bytes": list(lp.bytes), "logprob": lp.logprob}
        if top:
            out["top_logprobs"] = [one(t, False) for t in lp.top]
        return {k: v for k, v in out.items() if v != []} if bare else out
    return [one(lp, True) for lp in ev.logprobs]

"""Why a prompt missed the cache: where it parted from the longest cached prefix, and what changed there.

Rules:
- Every prepared prompt gets a ``CacheMiss``: the token offset where it parts from the cached entry sharing
  the longest prefix with it, how many of that entry's tokens were lost past it, and a ``reason``:

  ``hit``            nothing was lost: the entry is reused whole (the prompt only adds to it)
  ``cold``           nothing cached shares a token with it (a first request, or the cache was emptied)
  ``evicted``        a recent prompt shared more, but its entry is gone (the byte budget evicted it)
  ``in_flight``      a recent prompt shared more, but it has kept no entry: it is still being generated (a
                     sub-agent started beside it, or its own next turn holds the entry), or it ended keeping none
  ``system_changed`` a system message differs (``billing_header``: Claude Code's per-session header line)
  ``tools_changed``  the tool definitions differ (added, removed, reordered or edited: the detail says which)
  ``messages_changed`` an earlier message differs (which message, which field: content, reasoning, tool calls)
  ``thinking_dropped`` an earlier assistant turn came back without the thinking it was sent with, or the
                     template stopped rendering it (Qwen3-style templates drop it once a new user turn comes)
  ``answer_rewritten`` the previous answer came back as other text than was generated (trimmed, re-serialised
                     tool calls …): the prompt parts inside the generated span
  ``template_rerender`` the request's messages are what they were, but the template rendered them otherwise
  ``settings_changed`` something else that shapes the prompt changed (tool choice, reasoning level, template
                     variables, output format)
  ``not_found``      (``compare`` only) the earlier response named for the comparison is not known here

- The comparison is between request fingerprints (hashes of each part, never text), kept with the cached entry
  by the request that made it, and the token offset from the ids themselves. An entry read back from disk (no
  fingerprint kept) is classified from the offset alone.
- ``where`` names the part the offset falls in, as a client would recognise it: ``system``, ``tools``,
  ``tool 3``, ``message 3 (assistant) content``, ``the previous answer``, ``message 5 (assistant) thinking``.
- ``compare`` diagnoses a prompt against one named earlier prompt (a client's ``previous_message_id`` /
  ``comparison_response_id``) instead of the longest cached prefix: ``hit`` when this prompt starts with all of it.
- Anthropic's ``cache_miss_reason`` (cache-diagnosis beta) and the Responses ``prompt_cache_diagnostics`` are the
  protocols' projections of this data.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from ...chat_request import ChatRequest, ImagePart, Message

BILLING = "x-anthropic-billing-header"
REASONS = ("hit", "cold", "evicted", "in_flight", "system_changed", "tools_changed", "messages_changed",
           "thinking_dropped", "answer_rewritten", "template_rerender", "settings_changed", "not_found")


_JSON = json.JSONEncoder(sort_keys=True, default=str)  # one encoder (``json.dumps`` with options makes one a call)


def _h(value: Any) -> str:
    return hashlib.sha256(_JSON.encode(value).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fingerprint:
    system: tuple[str, ...]  # per leading system message, per line (hashes)
    tools: tuple[tuple[str, str], ...]  # (name, hash of the definition)
    # per message: (role, content, reasoning, tool calls) hashes, its images' digests (short), and a hash of the ids
    # tying calls to results (its calls' ids; a result's call id and tool name), which some templates write
    messages: tuple[tuple, ...]
    settings: str
    note: str = ""  # the text closing the system prompt (ChatRequest.closing_note), hashed; "" for none

    @classmethod
    def of(cls, req: ChatRequest) -> "Fingerprint":
        msgs = list(req.messages)
        system: list[str] = []
        while msgs and msgs[0].role == "system":
            system.append(_h(msgs.pop(0).content.splitlines()))  # (line endings aside)
        # a deferred tool is not in the prompt's header (a tool message referencing it carries it): not a tool here
        tools = tuple((t.name, _h([t.description, t.parameters, t.namespace, t.custom])) for t in req.tools
                      if not t.deferred)
        return cls(tuple(system), tools, tuple(_msg(m) for m in msgs),
                   _h([req.tool_choice, req.tool_names, req.reasoning, req.template_kwargs,
                       req.grammar.kind if req.grammar else None, req.parallel_tool_calls]),
                   _h(req.closing_note.splitlines()) if req.closing_note else "")

    def as_json(self) -> list:
        """As a JSON value (rank 0's message to a group's followers: group/lockstep.py); ``from_json`` reads it."""
        return [list(self.system), [list(t) for t in self.tools], [[*m[:4], list(m[4]), m[5]] for m in self.messages],
                self.settings, self.note]

    @classmethod
    def from_json(cls, value: list) -> "Fingerprint":
        system, tools, messages, settings, note = value
        return cls(tuple(system), tuple(tuple(t) for t in tools),
                   tuple((*m[:4], tuple(m[4]), m[5]) for m in messages), settings, note)

    def answered_by(self, later: "Fingerprint") -> bool:
        """``later``'s request continues this one after a final answer: the same system messages and tools, this
        one's messages (their thinking and call ids aside: a client may drop or rename them), then an assistant
        message that calls no tool. Such a conversation goes on only with a new user message (a template drops the
        thinking of the turns before one: Qwen3's), never with this request's tool loop."""
        n = len(self.messages)
        if len(later.messages) <= n or later.messages[n][0] != "assistant" or later.messages[n][3]:
            return False
        if self.system != later.system or self.note != later.note or self.tools != later.tools:
            return False
        return later.messages[:n] == self.messages or all(
            (a[0], a[1], a[3:5]) == (b[0], b[1], b[3:5]) for a, b in zip(self.messages, later.messages))


def _msg(m: Message) -> tuple:
    images = tuple(p.digest[:16] for p in m.parts if isinstance(p, ImagePart))
    text = [m.content, list(m.tool_references)] if m.tool_references else m.content
    ids = [[c.id for c in m.tool_calls], m.tool_call_id, m.name] if m.tool_calls or m.tool_call_id or m.name else ""
    return (m.role, _h([text, images] if images else text), _h(m.reasoning) if m.reasoning else "",
            _h([[c.name, c.arguments] for c in m.tool_calls]) if m.tool_calls else "", images, _h(ids) if ids else "")


@dataclass(frozen=True)
class CacheMiss:
    reason: str
    offset: int  # the prompt token where it parts from the cached entry (its cached prefix ends there)
    missed_tokens: int  # the entry's tokens past that offset, which this prompt could not reuse
    where: str = ""  # the part of the request the offset falls in
    detail: str = ""
    prompt_tokens: int = 0
    entry_tokens: int = 0

    @property
    def missed(self) -> bool:
        return self.reason not in ("hit",)

    def as_dict(self) -> dict:
        return asdict(self)

    def log_text(self) -> str:
        if self.reason == "hit":
            return "hit"
        where = f" in {self.where}" if self.where else ""
        return f"{self.reason} at token {self.offset}{where} (-{self.missed_tokens} tok)"


@dataclass
class Probe:
    """What the cache holds nearest a prompt: the entry sharing the longest prefix (``n`` tokens of ``length``),
    the fingerprint and prompt length of the request that made it, and the longest prefix a recently prepared
    prompt shared (``recent``), and whether an entry holding that prompt was evicted since (``evicted``)."""
    n: int = 0
    length: int = 0
    fingerprint: Fingerprint | None = None
    prompt_length: int | None = None  # where the entry's answer starts
    recent: int = 0
    evicted: bool = False
    any_entry: bool = False
    spans: tuple = field(default_factory=tuple)


def diagnose(req: ChatRequest, fp: Fingerprint, tokens: Sequence[int], probe: Probe, text: str | None = None
             ) -> CacheMiss:
    """``text``: the rendered prompt (where it is known: whether the template writes the calls' ids)."""
    n, total = probe.n, len(tokens)
    base = dict(offset=n, prompt_tokens=total, entry_tokens=probe.length)
    if probe.length and (n >= probe.length or n >= total - 1):
        return CacheMiss("hit", missed_tokens=0, **base)
    if probe.recent > n + 32 and probe.recent > probe.length:
        if probe.evicted:
            return CacheMiss("evicted", missed_tokens=probe.recent - n,
                             detail=f"a recent prompt shared {probe.recent} tokens; the cache now holds {n}", **base)
        return CacheMiss("in_flight", missed_tokens=probe.recent - n,
                         detail=f"a recent prompt shares {probe.recent} tokens (the cache holds {n}), but has kept no "
                                f"entry: it is still being generated, or it ended keeping none", **base)
    if not probe.any_entry or (n == 0 and probe.fingerprint is None):
        return CacheMiss("cold", missed_tokens=0, **base)
    lost = probe.length - n
    old = probe.fingerprint
    if probe.prompt_length is not None and n >= probe.prompt_length:
        k = len(old.messages) if old else None
        return CacheMiss("answer_rewritten", missed_tokens=lost, where="the previous answer",
                         detail=f"message {_index(fp, k)} (assistant) parts from the generated text "
                                f"{n - probe.prompt_length} tokens into it", **base)
    if old is None:
        return CacheMiss("messages_changed" if n else "cold", missed_tokens=lost, **base)
    return _compare(req, old, fp, lost, base, text)


def compare(req: ChatRequest, fp: Fingerprint, tokens: Sequence[int],
            earlier: tuple[Fingerprint, Sequence[int]] | None, text: str | None = None) -> CacheMiss:
    """This prompt against one earlier prompt (its request's fingerprint and its token ids; None: not known)."""
    if earlier is None:
        return CacheMiss("not_found", 0, 0, prompt_tokens=len(tokens))
    old_fp, old = earlier
    n, limit = 0, min(len(old), len(tokens))
    step = 256
    while n < limit and tuple(old[n:n + step]) == tuple(tokens[n:n + step]):
        n += step
    n = min(n, limit)
    while n < limit and old[n] == tokens[n]:
        n += 1
    base = dict(offset=n, prompt_tokens=len(tokens), entry_tokens=len(old))
    if n >= len(old):
        return CacheMiss("hit", missed_tokens=0, **base)
    return _compare(req, old_fp, fp, len(old) - n, base, text)


def _index(fp: Fingerprint, k: int | None) -> int | None:
    """A message's index in the request (system messages first) from its index after them."""
    return None if k is None else k + len(fp.system)


def _compare(req: ChatRequest, old: Fingerprint, new: Fingerprint, lost: int, base: dict,
             text: str | None = None) -> CacheMiss:
    if old.system != new.system:
        for i, (a, b) in enumerate(zip(old.system, new.system)):
            if a != b:
                first = req.messages[i].content.splitlines()[:1]
                if first and first[0].startswith(BILLING):
                    return CacheMiss("system_changed", missed_tokens=lost, where=f"message {i} (system)",
                                     detail="billing_header: its first line changes every session", **base)
                return CacheMiss("system_changed", missed_tokens=lost, where=f"message {i} (system)", **base)
        return CacheMiss("system_changed", missed_tokens=lost, where="system",
                         detail=f"{len(old.system)} system message(s) before, {len(new.system)} now", **base)
    if old.note != new.note:
        return CacheMiss("system_changed", missed_tokens=lost, where="system",
                         detail="the text closing it changed (verbosity, memory, compaction summaries)", **base)
    if old.tools != new.tools:
        return CacheMiss("tools_changed", missed_tokens=lost, **_tools_where(old.tools, new.tools), **base)
    for k, (a, b) in enumerate(zip(old.messages, new.messages)):
        if a[:5] == b[:5]:  # (the ids tying calls to results: below)
            continue
        i = _index(new, k)
        role = req.messages[i].role
        if a[0] != b[0]:
            return CacheMiss("messages_changed", missed_tokens=lost, where=f"message {i}",
                             detail=f"its role was {a[0]}, now {b[0]}", **base)
        if a[2] and not b[2]:
            return CacheMiss("thinking_dropped", missed_tokens=lost, where=f"message {i} ({role}) thinking",
                             detail="sent with its thinking before, without it now", **base)
        if a[4] != b[4] and a[1] != b[1]:  # an image of it changed (the first that differs is named)
            old_images, new_images = a[4], b[4]
            j = next((j for j, (x, y) in enumerate(zip(old_images, new_images)) if x != y),
                     min(len(old_images), len(new_images)))
            parts = [p for p in req.messages[i].parts if isinstance(p, ImagePart)]
            detail = (f"image {j} ({parts[j].where}) is another image than before" if j < len(parts)
                      else f"{len(old_images)} image(s) before, {len(new_images)} now")
            if j < len(old_images) or j < len(new_images):
                return CacheMiss("messages_changed", missed_tokens=lost, where=f"message {i} ({role}) image {j}",
                                 detail=detail, **base)
        part = "content" if a[1] != b[1] else "thinking" if a[2] != b[2] else "tool calls"
        return CacheMiss("messages_changed", missed_tokens=lost, where=f"message {i} ({role}) {part}", **base)
    if len(new.messages) < len(old.messages):
        return CacheMiss("messages_changed", missed_tokens=lost, where=f"message {_index(new, len(new.messages))}",
                         detail=f"{len(old.messages) - len(new.messages)} message(s) removed from the end", **base)
    if old.settings != new.settings:
        return CacheMiss("settings_changed", missed_tokens=lost,
                         detail="tool choice, reasoning level, template variables or output format", **base)
    # the request only adds to the earlier one, yet the prompt parts inside it: the template rendered it otherwise,
    # or wrote ids that changed (a client that renames its calls' ids each turn), whichever comes first
    k = _thinking_before(req, new)
    ids = next((_index(new, j) for j, (a, b) in enumerate(zip(old.messages, new.messages)) if a[5] != b[5]), None)
    if ids is not None and text is not None and not _ids_written(req.messages[ids], text):
        ids = None  # the template writes none of them: not where the prompt parted
    if ids is not None and (k is None or ids < k):
        role = req.messages[ids].role
        what = "its tool calls' ids" if role == "assistant" else "the call id or tool name it answers"
        return CacheMiss("messages_changed", missed_tokens=lost, where=f"message {ids} ({role}) ids",
                         detail=f"{what} changed, which the template writes", **base)
    if k is not None:
        return CacheMiss("thinking_dropped", missed_tokens=lost, where=f"message {k} (assistant) thinking",
                         detail="the template no longer renders an earlier turn's thinking", **base)
    return CacheMiss("template_rerender", missed_tokens=lost, **base)


def _ids_written(m: Message, text: str) -> bool:
    """Whether the rendered prompt holds this message's call ids (a template that writes them)."""
    return any(c.id and c.id in text for c in m.tool_calls) or bool(m.tool_call_id and m.tool_call_id in text)


def _thinking_before(req: ChatRequest, fp: Fingerprint) -> int | None:
    """The last assistant message that carries thinking before the newest user message (what a Qwen3-style
    template stops rendering), as a request index."""
    msgs = list(req.messages)
    last_user = max((i for i, m in enumerate(msgs) if m.role == "user"), default=-1)
    found = [i for i, m in enumerate(msgs[:last_user]) if m.role == "assistant" and m.reasoning]
    return found[-1] if found else None


def _tools_where(old: tuple, new: tuple) -> dict:
    """Which tool definitions changed, by position and count (a record holds no tool names)."""
    names_old, names_new = [n for n, _ in old], [n for n, _ in new]
    added = sum(1 for n in names_new if n not in names_old)
    removed = sum(1 for n in names_old if n not in names_new)
    if added or removed:
        parts = ([f"{added} added"] if added else []) + ([f"{removed} removed"] if removed else [])
        return {"where": "tools", "detail": ", ".join(parts)}
    if sorted(names_old) == sorted(names_new) and names_old != names_new:
        first = next(i for i, (a, b) in enumerate(zip(names_old, names_new)) if a != b)
        return {"where": f"tool {first}", "detail": "reordered"}
    changed = [i for i, ((_, a), (_, b)) in enumerate(zip(old, new)) if a != b]
    return {"where": f"tool {changed[0]}" if changed else "tools", "detail": "its definition changed"}

#!/usr/bin/env python3
"""Prompt-cache reuse over an 8-turn agent session: tinytitan serve (and mlx_lm.server on plain chat).

Every turn appends the previous answer and new user text (or a tool result) and sends the whole conversation
again, streaming, greedy. Per turn it prints the server's cached tokens ÷ the **reusable prefix**: the tokens
this prompt shares with the previous prompt followed by the tokens the server generated for it.

How "reusable" is computed, exactly:
- the prompt's token ids are rendered in-process the way the server renders them: for tinytitan, the request
  body goes through tinytitan's own protocol parser and ``MLXBackend.prepare`` (chat template + tokenizer);
  for mlx_lm.server, ``tokenizer.apply_chat_template`` as mlx_lm.server calls it. Both are checked against the
  prompt length the server reports in ``usage``;
- the generated token ids are not on the wire, so the answer is regenerated greedily in-process with
  ``mlx_lm.stream_generate`` on the same prompt ids, and checked against the text the server streamed
  (a mismatch is flagged). An answer re-tokenized from its text need not equal the generated tokens (the
  demo models' random weights often pick non-canonical tokenizations): reuse counts only up to where the
  new prompt and ``previous prompt + generated ids`` diverge.

Variants:
- ``chat``: plain chat over /v1/chat/completions (system + user; the client sends back the answer's text).
  Also run against ``mlx_lm server`` (the peer).
- ``nothink`` (opt-in): the same plain chat with reasoning off (``reasoning_effort: "none"``): the Qwen3 template
  opens the turn it generates with an empty think block that it leaves out once the turn is answered.
- ``billing`` (opt-in): the same plain chat, but the system message opens with Claude Code's billing line
  (``x-anthropic-billing-header: …cch=<random>;``, new every turn) — what a plain prefix cache does with it: the
  changing first line leaves almost nothing to reuse (see the cached÷prompt column), on mlx_lm.server and on
  tinytitan alike, since tinytitan drops that line only where Claude Code sends it (Anthropic system blocks).
- ``claude``: shaped like Claude Code over /v1/messages: the system prompt as 3 text blocks, the first one
  ``x-anthropic-billing-header: cc_version=…; cc_entrypoint=cli; cch=<random every turn>;``, tools (Bash, Read,
  Grep, Edit), tool_use / tool_result turns, and ``role: "system"`` messages mid-conversation.
- ``thinking``: thinking on (``reasoning_effort: high``) over /v1/chat/completions, agent tool loops whose
  assistant turns carry ``reasoning_content``; the template (Qwen3-like) renders the thinking of the turns after
  the last user query and drops it once a new user query arrives — an edit far back in the prompt: only the
  tokens after the edit should be recomputed.

Target (issue 3): cached ÷ reusable ≥ 0.98 on every turn of every variant. The summary also says how many
entries (and MiB) tinytitan's prompt cache holds after a variant that it did not before (from ``/health``): a
conversation should leave one, not one per turn. ``--ranks 2`` serves tinytitan from a group of two processes on
loopback (lockstep decoding, MLX's ring backend): rank 0's cache is the one counted, and each follower's must hold
the same entries (else it stops, diverged, and the next turn fails).

**Naive reusable** (issue 22) counts what a client would expect to be reused: the tokens of this prompt that lie
wholly inside the text the previous turn already covered — its rendered prompt followed by the text of its
answer (the common *text* prefix, converted to this prompt's own ids), the answer up to its first U+FFFD (the
demo models' random weights emit byte tokens that are not UTF-8: the client gets U+FFFD back, other bytes than
were generated). A server that re-tokenizes the answer
loses the tokens from where its ids and the generated ids part; tinytitan reuses the generated ids where the
answer comes back unchanged (``prompt_splice.py``), so the in-process rendering mirrors that: a local prompt
cache (no KV) is given each turn's prompt and generated ids, as the server's is. Target (issue 22): cached ÷
naive reusable ≥ 0.995 summed over turns 2+ (and per turn), beside mlx_lm.server in the same run.

    python tools/bench_session.py                         # demo model, all variants + the peer (~1-2 min)
    python tools/bench_session.py --models demo,50m --turns-50m 4
    python tools/bench_session.py --variants chat,nothink --no-peer --tinytitan-entry OLD   # another checkout
    python tools/bench_session.py --variants nothink,thinking --no-peer --ranks 2          # a group of two
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (ROOT, ensure_model, fmt, get_json, machine_line, median, post_stream,  # noqa: E402
                          start_mlx_lm_server, start_tinytitan, table, utc_now)

TARGET = 0.98
REPLACEMENT = "\ufffd"
NAIVE_TARGET = 0.995
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
                     "x-app": "cli", "user-agent": "claude-cli/2.1.3 (external, cli)"}

WORDS = ("the a parser token cache engine server client stream event request response prompt model file test "
         "function class module import return value error line path config build run check fix update read write "
         "list dict string number table spec field route header queue slot thread loop decode render template "
         "should would could must can will please now then also first next finally because since while").split()


class Text:
    """Deterministic filler text (same on every machine)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def words(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def sentences(self, n: int, words: int = 12) -> str:
        return " ".join(self.words(words).capitalize() + "." for _ in range(n))

    def code(self, lines: int) -> str:
        out = []
        for i in range(lines):
            ind = "    " * (i % 3)
            out.append(f"{ind}{self.rng.choice(['x', 'y', 'tok', 'buf', 'req'])}_{i} = "
                       f"{self.rng.choice(['parse', 'render', 'decode', 'fetch'])}({self.rng.choice(WORDS)!r}, {i})")
        return "\n".join(out)


# -- in-process tokenization and regeneration -----------------------------------------------------------------
class Local:
    """The model's tokenizer + template as tinytitan renders them, and a raw mlx-lm copy of the model to learn
    the token ids a server generated (greedy decoding is deterministic)."""

    def __init__(self, model_dir: Path):
        sys.path.insert(0, str(ROOT))
        from tinytitan.blas import use_fast_blas

        self.blas = use_fast_blas()  # before mlx
        from mlx_lm import load

        from tinytitan.engine.backends.mlx import MLXBackend
        from tinytitan.protocols.anthropic_messages import AnthropicMessages
        from tinytitan.protocols.openai_chat import OpenAIChat

        self.model, self.tokenizer = load(str(model_dir))
        self.backend = MLXBackend(model_dir, lazy=True)
        self.protocols = {"chat": OpenAIChat(), "messages": AnthropicMessages()}

    def tinytitan_tokens(self, wire: str, body: dict) -> tuple[list[int], str]:
        """The prompt's ids and text as the server prepares them (its answer-id splice mirrored by the local
        backend's own prompt cache: ``generated`` feeds it)."""
        proto = self.protocols[wire]
        req = proto.chat_request(proto.validate(json.dumps(body).encode()))
        prepared = self.backend.prepare(req.with_(model=self.backend.model_id))
        return list(prepared.tokens), prepared.prompt_text

    def generated(self, tokens: list[int], gen: list[int]) -> None:
        """What the server's prompt cache now holds: this prompt and the ids generated after it."""
        self.backend.prompt_cache.store(tokens + gen, None)

    def reset(self) -> None:
        self.backend.prompt_cache.clear()

    def peer_tokens(self, body: dict) -> tuple[list[int], str]:
        """What mlx_lm.server renders for a plain chat body (string contents)."""
        msgs = [{"role": m["role"], "content": m["content"]} for m in body["messages"]]
        text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True)), text

    def naive_reusable(self, tokens: list[int], text: str, covered: str) -> int:
        """The ids of this prompt lying wholly inside the text it shares with ``covered`` (the previous prompt
        and its answer's text)."""
        from tinytitan.engine.prompt.splice import common_chars

        chars = common_chars(text, covered)
        lo, hi = 0, len(tokens)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(self.decode(tokens[:mid])) <= chars:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def generate(self, tokens: list[int], max_tokens: int) -> list[int]:
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.sample_utils import make_sampler

        return [r.token for r in stream_generate(self.model, self.tokenizer, mx.array(tokens), max_tokens=max_tokens,
                                                 sampler=make_sampler(temp=0.0))]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# -- the sessions ---------------------------------------------------------------------------------------------
class Session:
    """One conversation: builds each turn's body, sends it, and keeps the history the way a client does."""

    wire = "chat"
    path = "/v1/chat/completions"
    headers: dict = {}

    def __init__(self, model: str, max_tokens: int, seed: int):
        self.model = model
        self.max_tokens = max_tokens
        self.text = Text(seed)
        self.turn = 0

    def body(self) -> dict:
        raise NotImplementedError

    def chat_body(self, **extra) -> dict:
        """A streaming, greedy Chat Completions turn over ``self.messages``."""
        return {"model": self.model, "messages": list(self.messages), "stream": True, "temperature": 0,
                "max_tokens": self.max_tokens, "stream_options": {"include_usage": True}, **extra}

    def absorb(self, r) -> None:
        """Append the answer (and the next user text / tool result) for the next turn."""
        raise NotImplementedError

    @staticmethod
    def cached(usage: dict) -> int:
        return ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0

    @staticmethod
    def prompt_len(usage: dict) -> int | None:
        return usage.get("prompt_tokens")


class ChatSession(Session):
    name = "chat"

    def __init__(self, model, max_tokens, seed=1):
        super().__init__(model, max_tokens, seed)
        self.messages = [{"role": "system", "content": "You are a careful coding assistant. " + self.text.sentences(6)},
                         {"role": "user", "content": self.text.sentences(5)}]

    def body(self):
        return self.chat_body()

    def absorb(self, r):
        self.messages.append({"role": "assistant", "content": r.text})
        self.messages.append({"role": "user", "content": self.text.sentences(4)})


class NoThinkingChatSession(ChatSession):
    """Plain chat with reasoning off (``reasoning_effort: "none"``): on a Qwen3 template the turn generated opens
    with an empty think block that the template leaves out once the turn is answered, so each prompt parts from
    the last turn's cache entry before its answer. tinytitan only."""

    name = "nothink"

    def __init__(self, model, max_tokens, seed=5):
        super().__init__(model, max_tokens, seed)

    def body(self):
        return self.chat_body(reasoning_effort="none")


class BillingChatSession(ChatSession):
    """Plain chat whose system message opens with Claude Code's per-request billing line (new ``cch`` every
    turn) — the shape that defeats a plain prefix cache; runs on both servers."""

    name = "billing"

    def __init__(self, model, max_tokens, seed=4):
        super().__init__(model, max_tokens, seed)
        self.rng = random.Random(seed * 104729)
        self.system = self.messages[0]["content"]

    def body(self):
        cch = "".join(self.rng.choice("0123456789abcdef") for _ in range(5))
        self.messages[0] = {"role": "system", "content": f"x-anthropic-billing-header: cc_version=2.1.3.{cch[:3]}; "
                                                         f"cc_entrypoint=cli; cch={cch};\n{self.system}"}
        return super().body()


class ThinkingSession(Session):
    """Agent tool loops with thinking on; a new user query every third turn drops the earlier thinking."""

    name = "thinking"
    # after turn k: what the client appends next
    SCRIPT = {1: "tool", 2: "tool", 3: "user", 4: "tool", 5: "tool", 6: "user", 7: "user"}

    def __init__(self, model, max_tokens, seed=3):
        super().__init__(model, max_tokens, seed)
        self.messages = [{"role": "system", "content": "You are an agent that uses tools. " + self.text.sentences(5)},
                         {"role": "user", "content": self.text.sentences(4)}]

    def body(self):
        return self.chat_body(reasoning_effort="high", tools=CHAT_TOOLS)

    def absorb(self, r):
        self.turn += 1
        step = self.SCRIPT.get(self.turn, "user")
        msg = {"role": "assistant", "content": r.text,
               "reasoning_content": r.reasoning or ("I should look at the code first. " + self.text.sentences(2))}
        calls = list(r.tool_calls)
        if step == "tool" and not calls:
            calls = [{"id": f"call_{self.turn}", "type": "function",
                      "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/mod_{self.turn}.py"})}}]
        if calls:
            msg["tool_calls"] = calls
        self.messages.append(msg)
        for c in calls:
            self.messages.append({"role": "tool", "tool_call_id": c["id"] or "call_x", "content": self.text.code(8)})
        if step == "user" or not calls:
            self.messages.append({"role": "user", "content": self.text.sentences(3)})


CHAT_TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file from the workspace.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

CC_TOOLS = [
    {"name": "Bash", "description": "Executes a given bash command in a persistent shell session.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                                                       "description": {"type": "string"}},
                      "required": ["command"], "additionalProperties": False}},
    {"name": "Read", "description": "Reads a file from the local filesystem.",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"},
                                                       "limit": {"type": "number"}},
                      "required": ["file_path"], "additionalProperties": False}},
    {"name": "Grep", "description": "A powerful search tool built on ripgrep.",
     "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                      "required": ["pattern"], "additionalProperties": False}},
    {"name": "Edit", "description": "Performs exact string replacements in files.",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"},
                                                       "old_string": {"type": "string"},
                                                       "new_string": {"type": "string"}},
                      "required": ["file_path", "old_string", "new_string"], "additionalProperties": False}},
]


class ClaudeCodeSession(Session):
    """Shaped like Claude Code 2.1.x: billing-header first system block (new cch every request), cache_control
    marks, tools, tool_use/tool_result turns, and ``role: "system"`` reminders mid-conversation."""

    name = "claude"
    wire = "messages"
    path = "/v1/messages?beta=true"
    headers = ANTHROPIC_HEADERS
    # after turn k: (tool to call or None, then: a system reminder?)
    SCRIPT = {1: ("Read", False), 2: ("Grep", True), 3: (None, False), 4: ("Edit", False), 5: ("Bash", False),
              6: (None, True), 7: ("Bash", False)}

    def __init__(self, model, max_tokens, seed=2):
        super().__init__(model, max_tokens, seed)
        self.rng = random.Random(seed * 7919)
        self.instructions = ("You are an interactive CLI tool that helps users with software engineering tasks. "
                             + self.text.sentences(60))
        self.messages = [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the "
                                     "following context:\n# claudeMd\n" + self.text.sentences(8)
                                     + "\n</system-reminder>"},
            {"type": "text", "text": self.text.sentences(3), "cache_control": {"type": "ephemeral"}}]}]

    def body(self):
        cch = "".join(self.rng.choice("0123456789abcdef") for _ in range(5))
        system = [
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.3.{cch[:3]}; cc_entrypoint=cli; cch={cch};"},
            {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": self.instructions, "cache_control": {"type": "ephemeral"}},
        ]
        return {"model": self.model, "max_tokens": self.max_tokens, "stream": True, "temperature": 0,
                "system": system, "tools": CC_TOOLS, "messages": list(self.messages),
                "metadata": {"user_id": "user_bench_account__session_0"}}

    def absorb(self, r):
        self.turn += 1
        tool, remind = self.SCRIPT.get(self.turn, (None, False))
        content = []
        for b in r.blocks:  # what the model said, as the client keeps it
            if b.get("type") == "text" and b.get("text"):
                content.append({"type": "text", "text": b["text"]})
            elif b.get("type") == "tool_use":
                content.append({"type": "tool_use", "id": b["id"], "name": b["name"], "input": b.get("input") or {}})
        if tool and not any(c["type"] == "tool_use" for c in content):
            inputs = {"Read": {"file_path": "/repo/src/parser.py"}, "Grep": {"pattern": "def decode", "path": "/repo"},
                      "Edit": {"file_path": "/repo/src/parser.py", "old_string": "x = 1", "new_string": "x = 2"},
                      "Bash": {"command": "python -m pytest -q", "description": "Run the tests"}}[tool]
            content.append({"type": "tool_use", "id": f"toolu_{self.turn:02d}bench", "name": tool, "input": inputs})
        if not content:
            content = [{"type": "text", "text": "(no output)"}]
        self.messages.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": c["id"], "content": self.text.code(10)}
                   for c in content if c["type"] == "tool_use"]
        if results:
            self.messages.append({"role": "user", "content": results})
        else:
            self.messages.append({"role": "user", "content": [{"type": "text", "text": self.text.sentences(3)}]})
        if remind:
            self.messages.append({"role": "system", "content": "<system-reminder>The TodoWrite tool hasn't been used "
                                  "recently. " + self.text.sentences(2) + "</system-reminder>"})

    @staticmethod
    def cached(usage):
        return usage.get("cache_read_input_tokens") or 0

    @staticmethod
    def prompt_len(usage):
        if "input_tokens" not in usage:
            return None
        return usage["input_tokens"] + (usage.get("cache_read_input_tokens") or 0)


SESSIONS = {"chat": ChatSession, "nothink": NoThinkingChatSession, "billing": BillingChatSession,
            "claude": ClaudeCodeSession, "thinking": ThinkingSession}
PEER_VARIANTS = ("chat", "billing")  # mlx_lm.server speaks OpenAI chat only


def replay(session: Session, server, local: Local, turns: int, peer: bool) -> list[dict]:
    rows = []
    prev_prompt: list[int] | None = None
    prev_gen: list[int] = []
    covered = ""
    local.reset()
    for t in range(1, turns + 1):
        body = session.body()
        tokens, text = local.peer_tokens(body) if peer else local.tinytitan_tokens(session.wire, body)
        naive = local.naive_reusable(tokens, text, covered) if prev_prompt is not None else None
        r = post_stream(server.port, session.path, body, session.headers)
        if r.error:
            raise RuntimeError(f"{session.name} turn {t}: {r.error}")
        gen = local.generate(tokens, session.max_tokens)
        decoded = local.decode(gen)
        regen_ok = all(part.strip() in decoded for part in (r.reasoning, r.text) if part.strip())
        reusable = common_prefix(tokens, prev_prompt + prev_gen) if prev_prompt is not None else None
        cached = session.cached(r.usage)
        rows.append({"turn": t, "prompt": len(tokens), "server_prompt": session.prompt_len(r.usage),
                     "reusable": reusable, "cached": cached, "ratio": (cached / reusable) if reusable else None,
                     "naive": naive, "naive_ratio": (cached / naive) if naive else None,
                     "ttft": r.ttft, "gen": len(gen), "regen_ok": regen_ok,
                     "shared_prompt": common_prefix(tokens, prev_prompt) if prev_prompt is not None else None})
        prev_prompt, prev_gen = tokens, gen
        # an answer's text up to its first U+FFFD: past it the client got the character U+FFFD back, not the
        # bytes the model generated (an invalid or split UTF-8 sequence), so no server can reuse those ids
        covered = text + decoded.split(REPLACEMENT, 1)[0]
        if not peer:
            local.generated(tokens, gen)
        session.absorb(r)
    return rows


def print_rows(title: str, rows: list[dict]) -> str:
    out = []
    for r in rows:
        notes = []
        if r["server_prompt"] is not None and r["server_prompt"] != r["prompt"]:
            notes.append(f"server counted {r['server_prompt']} prompt tokens")
        if not r["regen_ok"]:
            notes.append("regenerated answer ≠ streamed text")
        if r["ratio"] is not None and r["ratio"] < TARGET:
            notes.append("BELOW TARGET")
        out.append([r["turn"], r["prompt"], fmt(r["shared_prompt"], "d"), fmt(r["reusable"], "d"),
                    fmt(r["naive"], "d"), r["cached"], fmt(r["ratio"]), fmt(r["naive_ratio"]),
                    fmt(r["ttft"] * 1000, ".1f"), r["gen"], "; ".join(notes)])
    text = f"{title}\n\n" + table(["turn", "prompt tok", "shared w/ prev prompt", "reusable (ids)", "naive reusable",
                                   "cached", "cached÷reusable", "cached÷naive", "TTFT ms", "answer tok", "note"], out,
                                  "rrrrrrrrrrl")
    print(text + "\n", flush=True)
    return text


def bench_model(variant: str, args, log_dir: Path) -> tuple[list[str], list[list]]:
    model_dir = ensure_model(variant, args.cache_dir)
    turns = args.turns if variant == "demo" else args.turns_50m
    mt = args.max_tokens or (48 if variant == "demo" else 32)
    print(f"\n== {variant}: {model_dir} ({turns} turns, answers up to {mt} tokens) ==", flush=True)
    local = Local(model_dir)
    texts, summary = [], []
    wanted = [v.strip() for v in args.variants.split(",") if v.strip()]
    tt = start_tinytitan(model_dir, log_dir, entry=args.tinytitan_entry, ranks=args.ranks)
    side = "tinytitan" if args.ranks == 1 else f"tinytitan, {args.ranks} ranks"
    try:
        for name in wanted:
            cls = SESSIONS[name]
            before = held(tt)
            rows = replay(cls(tt.model_id, mt), tt, local, turns, peer=False)
            after = held(tt)
            texts.append(print_rows(f"{variant} · {name} · {side}", rows))
            summary.append(summary_row(variant, name, side, rows,
                                       (after[0] - before[0], (after[1] - before[1]) / 2**20)))
    finally:
        tt.stop()
    peer_variants = [n for n in wanted if n in PEER_VARIANTS]
    if peer_variants and not args.no_peer:
        peer = start_mlx_lm_server(model_dir, log_dir, blas=args.peer_blas)
        try:
            for name in peer_variants:
                rows = replay(SESSIONS[name](str(model_dir), mt), peer, local, turns, peer=True)
                texts.append(print_rows(f"{variant} · {name} · mlx_lm.server", rows))
                summary.append(summary_row(variant, name, "mlx_lm.server", rows))
        finally:
            peer.stop()
    return texts, summary


def held(server) -> tuple[int, int]:
    """(entries, bytes) the server's prompt caches hold in memory, from ``/health``."""
    caches = get_json(server.port, "/health").get("prompt_cache") or {}
    return (sum(c["resident_entries"] for c in caches.values()), sum(c["resident_bytes"] for c in caches.values()))


def summary_row(variant, name, side, rows, kept=None):
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    worst = min(ratios) if ratios else None
    met = worst is not None and worst >= TARGET
    served = median(r["cached"] / r["prompt"] for r in rows[1:]) if len(rows) > 1 else None
    naive = [r for r in rows if r["naive"]]
    naive_total = sum(r["cached"] for r in naive) / sum(r["naive"] for r in naive) if naive else None
    naive_worst = min((r["naive_ratio"] for r in naive), default=None)
    return [variant, name, side, len(rows), fmt(worst), fmt(median(ratios)), fmt(naive_total), fmt(naive_worst),
            fmt(served),
            fmt(median(r["ttft"] * 1000 for r in rows[1:]), ".1f"),
            f"{kept[0]} / {kept[1]:.1f}" if kept else "—",
            ("met" if met else "MISSED") if side.startswith("tinytitan") else ("(peer) " + ("≥" if met else "<") + f" {TARGET}")]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="demo", help="comma-separated: demo, 50m (default demo)")
    p.add_argument("--variants", default="chat,claude,thinking",
                   help="chat, claude, thinking (default), nothink and billing; chat and billing also run on "
                        "mlx_lm.server")
    p.add_argument("--turns", type=int, default=8, help="turns on the demo model (default 8)")
    p.add_argument("--turns-50m", type=int, default=4, help="turns on the 50m model (default 4)")
    p.add_argument("--max-tokens", type=int, help="answer length cap (default: demo 48, 50m 32)")
    p.add_argument("--cache-dir", help="where to build the models (default: tinytitan's cache dir)")
    p.add_argument("--peer-blas", choices=["openblas", "bundled"], default="openblas")
    p.add_argument("--no-peer", action="store_true", help="skip mlx_lm.server")
    p.add_argument("--json", help="write the per-turn rows here")
    p.add_argument("--ranks", type=int, default=1, help="serve tinytitan from a group of this many processes on "
                   "loopback (default 1)")
    p.add_argument("--tinytitan-entry", metavar="SCRIPT", help="start tinytitan from this script instead of "
                   "`-m tinytitan` (same arguments): another checkout's server, for a before/after")
    args = p.parse_args()
    started = time.monotonic()
    print(f"bench_session {utc_now()} — {machine_line()}", flush=True)
    texts, summary = [], []
    with tempfile.TemporaryDirectory(prefix="tinytitan-bench-") as logs:
        for v in [v.strip() for v in args.models.split(",") if v.strip()]:
            t, s = bench_model(v, args, Path(logs))
            texts += t
            summary += s
    print(f"### Prompt cache over an agent session — {utc_now()} — {machine_line()}\n")
    print(table(["model", "variant", "server", "turns", "worst cached÷reusable", "median",
                 "Σcached÷Σnaive reusable", "worst cached÷naive", "median cached÷prompt",
                 "median TTFT ms (turns 2+)", "cache entries / MiB the session left", f"target ≥ {TARGET}"],
                summary, "lllrrrrrrrrl"))
    print(f"(naive-reusable target, issue 22: Σcached ÷ Σnaive ≥ {NAIVE_TARGET} on tinytitan)")
    print(f"\n(total {time.monotonic() - started:.0f}s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary}, indent=1))


if __name__ == "__main__":
    main()

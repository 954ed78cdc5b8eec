"""The conversations ``bench_session.py`` replays: each turn's body built as its client builds it (plain chat,
reasoning off, Claude Code's billing line, Claude Code's own shape over /v1/messages, thinking on), and the
history kept the way that client keeps it. Deterministic filler text, the same on every machine."""

from __future__ import annotations

import json
import random

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

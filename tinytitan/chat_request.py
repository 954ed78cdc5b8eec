"""ChatRequest: the one request shape the engine sees, whatever protocol it came in on.

Protocol quirks are resolved before one exists (developer → system, tool-result fan-out, namespace
flattening, the spellings of structured output and of reasoning controls). Content is text, and images
as typed parts (``ImagePart``): the bytes as the client sent them, keyed by their content's digest, never a
protocol's own shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, exactly as the model (or client) wrote it


@dataclass(frozen=True)
class ImagePart:
    """An image in a message, decoded from its protocol's spelling (a data URL, base64 source, Ollama's
    ``images``) but not yet looked at: the engine opens, checks and encodes it for the model that serves the
    request. ``digest`` (sha256 of ``images.PIXELS_VERSION`` and ``data``, hex: a change to how bytes become
    pixels is a new digest) is what the prompt cache keys it by; ``where`` is the request part it came from
    (``messages[2].content[1]``), named in every error about it."""
    data: bytes
    media_type: str  # as the client declared it ("image/png"); "" where the protocol does not say
    digest: str
    where: str
    # what its header said, once read (``images.check_declared``): kept so that the checks after do not open it
    # again; ``images``' own, opaque here, and no part of what the part is (not compared)
    header: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Message:
    role: Role
    content: str = ""  # the message's text (its text parts joined); images are in ``parts``
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # role=tool: the tool's name; any other role: the participant's name the client gave the turn (Chat's
    # ``name``), which the template reads where it names turns by it
    name: str | None = None
    reasoning: str | None = None  # earlier thoughts of an assistant turn, where the client sent them back
    # a tool result that loads deferred tools (Anthropic's ``tool_reference`` blocks): the names of the tools
    # whose definitions it carries, rendered after ``content`` in the family's own tool-declaration form
    tool_references: tuple[str, ...] = ()
    # the content in order, where it holds an image: text (str) and ImagePart; empty for a text-only message,
    # whose content is ``content``. Code that renders images reads ``parts``, everything else ``content``.
    # (Last, because messages are also built positionally.)
    parts: tuple["str | ImagePart", ...] = ()


FORMAT_NOTE = 'Answer in the JSON format "{name}": {description}'
UNNAMED_FORMAT_NOTE = "Answer in the requested JSON format: {description}"


@dataclass(frozen=True)
class Grammar:
    """An output format the sampler is masked with (see tinytitan/output_format.py for the spellings)."""
    kind: Literal["json_schema", "json_object", "lark", "regex"]
    source: Any
    name: str | None = None
    where: str | None = None  # the request field it came from, named when the grammar cannot be compiled
    # what the format is for (a json_schema format's ``description``): shown to the model (ChatRequest.closing_note)
    description: str | None = None
    # a json_schema format that is not strict: where the compiler refuses its schema, it is held to as much of it
    # as the compiler takes (engine/structured/best_effort.py), not refused
    loose: bool = False


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    namespace: str | None = None  # a Responses namespace this function was flattened out of
    # a freeform ("custom") tool: the model sees a function of one string, ``input``; its grammar (Lark or
    # regex; None: any text) is what that input must match
    custom: bool = False
    input_grammar: Grammar | None = None
    strict: bool = False  # a function tool whose arguments are enforced by its schema once a call opens
    # declared for later (``defer_loading``): left out of the prompt's tool header; a tool message that
    # references it (``Message.tool_references``) carries its definition, so loading it appends to the prompt
    deferred: bool = False


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: Literal["auto", "none", "required"] = "auto"  # required: enforced by a grammar
    tool_names: tuple[str, ...] = ()  # the tools a call may name (empty: any tool offered)
    parallel_tool_calls: bool = True
    max_tool_calls: int | None = None  # Responses' max_tool_calls: at most this many calls in the turn
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # how many tokens back the three penalties look (Ollama's repeat_last_n): 0 turns them off, -1 is the whole
    # context; None: mlx-lm's window (20)
    repeat_last_n: int | None = None
    # OpenAI's logit_bias: (token id, bias) pairs, each bias added to its token's logit before the draw (the ids
    # are the served model's tokenizer's, as every local server reads them)
    logit_bias: tuple[tuple[int, float], ...] = ()
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None  # None: run to the context window
    reasoning: str | bool | None = None  # an effort word, True/False, or None for the server default
    reasoning_budget_tokens: int | None = None
    template_kwargs: dict = field(default_factory=dict)  # never one of RENDERER_ARGUMENTS
    # a sentence that closes the system prompt (Chat's ``verbosity``): the request's own system message, else the
    # model's default one (a Modelfile's ``SYSTEM``), else a system message of its own — never in place of the default
    system_note: str = ""
    grammar: Grammar | None = None
    prompt: str | None = None  # a raw prompt: tokenized as written, no chat template (messages unused)
    # a raw prompt given as token ids (legacy Completions' list of ints): read as exactly these ids, never
    # re-tokenized (``prompt`` is then "", so the request is raw everywhere it is asked)
    prompt_ids: tuple[int, ...] | None = None
    suffix: str | None = None  # fill-in-the-middle: the text after the gap; ``prompt`` is the text before it
    fast: bool = False  # the "<id>-fast" chat-only path: scaffolding stripped
    # the last message is an assistant turn begun (a prefill): the answer continues its text, and holds only
    # what follows it
    continue_final: bool = False
    final_where: str = ""  # that message as the client sent it (``messages[3]``), for an error naming it
    workspace: str | None = None  # the X-TinyTitan-Workspace header, as sent (the memory layer's scope)
    memory: bool = True  # False: a request the server makes itself (compaction), which memory leaves alone
    # each generated token's log probability and this many likeliest alternatives (0: the chosen token's alone);
    # None: none asked (engine/decode/logprobs.py)
    logprobs: int | None = None
    # the prompt's own tokens' log probabilities (each given the tokens before it) and this many alternatives, sent
    # as one PromptLogprobs event before the answer; None: none asked (engine/decode/logprobs.py)
    prompt_logprobs: int | None = None
    speculative: bool = True  # False: decoded without drafts (prompt lookup, a draft model) whatever the server does
    # several rows read this prompt (a request's choices): its KV cache is kept where the prompt is read, even where a
    # cache that stays trimmable needs no checkpoint (cache/checkpoint.py), and a cached entry is copied, not taken
    shared_prompt: bool = False
    response_id: str | None = None  # the id its answer carries: a later request may name it for a cache comparison
    cache_compare: str | None = None  # an earlier answer's id: the prompt-cache diagnosis is relative to its prompt

    @property
    def closing_note(self) -> str:
        """The text closing the system prompt: ``system_note``, then the output format's description, which
        OpenAI's API documents as "used by the model to determine how to respond in the format"."""
        g = self.grammar
        if g is None or not g.description:
            return self.system_note
        described = (FORMAT_NOTE if g.name else UNNAMED_FORMAT_NOTE).format(name=g.name, description=g.description)
        return "\n\n".join(t for t in (self.system_note, described) if t)

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """Every image of the conversation, in order."""
        return tuple(p for m in self.messages for p in m.parts if isinstance(p, ImagePart))

    def with_(self, **changes) -> "ChatRequest":
        return replace(self, **changes)


# What the prompt renderer (the tokenizer's apply_chat_template) sets itself or takes as its own options:
# a client's template variables may not use these names.
RENDERER_ARGUMENTS = frozenset({
    "messages", "conversation", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs",
})

"""Model families: which markup a model writes, how its template takes roles, where its turn ends.

``detect(tokenizer, config)`` picks the family from the chat template's source and the vocabulary (the
template is the surest sign: it is what taught the model its markup), with config.json's ``model_type`` as
a fallback. A ``Family`` gives the backend:

- ``parser(...)``: a streaming output parser (``feed(piece) -> (events, channel)``, ``finish()``,
  ``tool_calls``) for its markup;
- ``map_roles(messages, tools, template_source)``: the message dicts its template accepts (``roles.py``);
- ``starts_in_reasoning(prompt)``: whether the rendered prompt already opened the reasoning channel;
- ``stop_tokens``: the tokens that end its turn (made end-of-sequence tokens where the model's own config
  forgot one, e.g. Llama's ``<|eom_id|>`` after a tool call, gpt-oss's ``<|call|>``).

| family       | reasoning              | tool calls                                                              |
|--------------|------------------------|-------------------------------------------------------------------------|
| qwen         | ``<think>…</think>``   | ``<tool_call>{"name", "arguments"}</tool_call>`` (Qwen2.5 / Qwen3)      |
| qwen3_coder  | ``<think>…</think>``   | ``<tool_call><function=N><parameter=P>v</parameter></function></tool_call>`` |
| llama3       | —                      | ``<|python_tag|>{json}`` or a bare ``{"name", "parameters"}`` answer    |
| mistral      | ``[THINK]…[/THINK]``   | ``[TOOL_CALLS]N[ARGS]{json}`` or ``[TOOL_CALLS][{json}, …]``            |
| glm          | ``<think>…</think>``   | ``<tool_call>N\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value></tool_call>`` |
| gemma        | —                      | ```` ```tool_code\\nN(k=v)\\n``` ```` or a bare JSON call             |
| gemma4       | ``<|channel>thought…<channel|>`` | ``<|tool_call>call:N{k:<|"|>v<|"|>}<tool_call|>``             |
| function_gemma | —                    | ``<start_function_call>call:N{k:<escape>v<escape>}<end_function_call>`` |
| gpt_oss      | harmony ``analysis``   | harmony ``commentary to=functions.N … <|message|>{json}<|call|>``      |
| deepseek_v3  | ``<think>…</think>``   | ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…`` |
| deepseek_r1  | ``<think>…</think>``   | ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\\n```json\\n{json}\\n```…`` |
| deepseek_v32 | ``<think>…</think>``   | ``<｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter name="P" string="true">v…`` |
| kimi_k2      | ``<think>…</think>``   | ``<|tool_calls_section_begin|><|tool_call_begin|>functions.N:0<|tool_call_argument_begin|>{json}…`` |
| minimax_m2   | ``<think>…</think>``   | ``<minimax:tool_call><invoke name="N"><parameter name="P">v</parameter></invoke>…`` |

A family is a row (``Family``: markers, reasoning markers, stop tokens, role conventions, which syntax) with a
sign in ``DETECTION``. Each call syntax is one module in ``syntaxes/`` owning its streaming decoder, its checking
Lark grammar (``grammars/``, run by ``grammar.py``), the grammar that forces a call in it, and how past calls
are rendered back; why the decoders are hand-written (Lark cannot stream): see ``bodies/make.py``.
"""

from __future__ import annotations

import dataclasses

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from .harmony_parser import HarmonyParser
from .markup import PLAIN, QWEN, REASONING, TEXT, TOOL, Markup
from .roles import RoleConventions, map_roles
from .scanner import OutputParser
from .syntaxes import SYNTAXES, Syntax

log = logging.getLogger("tinytitan.families")

__all__ = ["Family", "FAMILIES", "detect", "template_source", "Markup", "OutputParser", "HarmonyParser",
           "REASONING", "TEXT", "TOOL"]


@dataclass(frozen=True)
class Family:
    """A row: the family's markers (``markup``; None for harmony), the syntax it writes calls in (named by
    ``markup.body``, see ``syntaxes/``), the tokens that end its turn, how its template takes roles, and the
    JSON key of its call objects / whether it writes one call a turn (Llama 3)."""

    name: str
    markup: Markup | None  # None: harmony
    stop_tokens: tuple[str, ...] = ()
    roles: RoleConventions = field(default_factory=RoleConventions)
    call_key: str = "arguments"
    one_call: bool = False

    @property
    def syntax(self) -> Syntax:
        return SYNTAXES["harmony" if self.markup is None else self.markup.body]

    @property
    def harmony(self) -> bool:
        return self.markup is None

    def parser(self, start_in_reasoning: bool = False, namespaces: dict[str, str] | None = None,
               tools: dict[str, dict] | None = None, calls: bool = True, continues: bool = False):
        """``calls=False`` (the request declared no tools, or tool_choice none): tool-call markup the model
        writes anyway is its text, never a call the client did not offer. ``continues``: the answer goes on
        from a prefill's text, so its first characters (whitespace included) are text."""
        if self.markup is None:
            return HarmonyParser(start_in_reasoning, namespaces, tools, continues, calls)
        markup = self.markup if calls else dataclasses.replace(self.markup, tool_open=None, tool_close=None,
                                                               bare_json=False)
        return OutputParser(markup, start_in_reasoning, namespaces, tools, continues)

    def starts_in_reasoning(self, prompt: str) -> bool:
        tail = prompt.rstrip()
        if self.markup is None:
            return tail.endswith("<|channel|>analysis<|message|>")
        opener = self.markup.think_open
        return bool(opener) and tail.endswith(opener)

    def leaves_thought_open(self, text: str) -> bool:
        """A prefill's text (``ChatRequest.continue_final``) that opens a thought it does not close: the answer
        goes on inside that thought (a client's ``<think>`` prefill, which forces reasoning)."""
        if self.markup is None or not (self.markup.think_open and self.markup.think_close):
            return False
        return text.rfind(self.markup.think_open) > text.rfind(self.markup.think_close)

    def render_calls(self, calls: list[tuple[str, Any]]) -> str:
        """Past calls ``[(name, arguments)]`` as this family writes them (markers included)."""
        return self.syntax.render(calls, self)

    def map_roles(self, messages: list[dict], tools: list[dict] | None,
                  template_src: str | None) -> tuple[list[dict], list[dict] | None]:
        render = self.render_calls if self.syntax.render is not None else None
        msgs, tools = map_roles(messages, tools, template_src, self.roles, render)
        if self.markup is None:
            msgs = [_harmony_message(m) for m in msgs]
        return self.syntax.history(msgs), tools


def _harmony_message(m: dict) -> dict:
    """Harmony templates read earlier reasoning as ``thinking``; a tool-calling turn may carry one analysis
    message, not a preamble and reasoning both (the template refuses that), so the two are joined."""
    if m.get("role") != "assistant":
        return m
    m = dict(m)
    thinking = m.pop("reasoning_content", None) or ""
    if m.get("tool_calls") and m.get("content") and thinking:
        thinking, m["content"] = thinking + "\n\n" + m["content"], ""
    if thinking:
        m["thinking"] = thinking
    return m


def _without_thinking(fam: Family) -> Family:
    return replace(fam, markup=replace(fam.markup, think_open=None, think_close=None))


QWEN_FAMILY = Family("qwen", QWEN, ("<|im_end|>", "<|endoftext|>"))
QWEN3_CODER = Family("qwen3_coder", replace(QWEN, body="xml"), ("<|im_end|>", "<|endoftext|>"))
LLAMA3 = Family("llama3", Markup(None, None, "<|python_tag|>", None, "json", bare_json=True),
                ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), call_key="parameters", one_call=True)
MISTRAL = Family("mistral", Markup("[THINK]", "[/THINK]", "[TOOL_CALLS]", None, "mistral"), ("</s>",),
                 RoleConventions(alternate=True, short_ids=True))
GLM = Family("glm", replace(QWEN, body="kv"), ("<|user|>", "<|observation|>", "<|endoftext|>"))
GEMMA = Family("gemma", Markup(None, None, "```tool_code", "```", "pythonic", bare_json=True),
               ("<end_of_turn>", "<eos>"), RoleConventions("tool_output", "pythonic", alternate=True))
GEMMA4 = Family("gemma4", Markup("<|channel>thought", "<channel|>", "<|tool_call>", "<tool_call|>", "gemma4"),
                ("<turn|>", "<end_of_turn>", "<eos>"))
FUNCTION_GEMMA = Family("function_gemma", Markup(None, None, "<start_function_call>", "<end_function_call>",
                                                 "function_gemma"), ("<end_of_turn>", "<eos>"),
                        RoleConventions("tool_output", "pythonic", alternate=True))
GPT_OSS = Family("gpt_oss", None, ("<|return|>", "<|call|>"),
                 RoleConventions(single_call=True, system_first_only=True))
DEEPSEEK_V3 = Family("deepseek_v3", Markup("<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                                          "deepseek"), ("<｜end▁of▁sentence｜>",))
# V3, V3-0324, R1, R1-0528 (and its distills): the older call format (``syntaxes/deepseek_r1.py``)
DEEPSEEK_R1 = replace(DEEPSEEK_V3, name="deepseek_r1", markup=replace(DEEPSEEK_V3.markup, body="deepseek_r1"))
KIMI_K2 = Family("kimi_k2", Markup("<think>", "</think>", "<|tool_calls_section_begin|>",
                                   "<|tool_calls_section_end|>", "kimi", tool_ends_thought=True), ("<|im_end|>",))
MINIMAX_M2 = Family("minimax_m2", Markup("<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>",
                                         "minimax"), ("[e~[",), RoleConventions(system_first_only=True))
DEEPSEEK_V32 = Family("deepseek_v32", Markup("<think>", "</think>", "<｜DSML｜function_calls>",
                                            "</｜DSML｜function_calls>", "dsml"), ("<｜end▁of▁sentence｜>",),
                      RoleConventions(system_first_only=True))
GENERIC = Family("generic", QWEN)


@dataclass(frozen=True)
class Sign:
    """How a family is recognised: any of ``template`` in the chat template's source, any of ``vocab`` in the
    template or the vocabulary (all of ``also`` too, where given), or a config.json ``model_type``.
    ``thinking``: the reasoning marker whose absence (template and vocabulary) drops the family's reasoning."""

    template: tuple[str, ...] = ()
    vocab: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    model_prefix: str | None = None
    thinking: str | None = None


# the detection table: the first row whose sign matches (the template is the surest sign: it is what taught the
# model its markup); a family is a row here
DETECTION: list[tuple[Family, Sign]] = [
    (DEEPSEEK_V32, Sign(template=("｜DSML｜",), thinking="<think>")),
    (MINIMAX_M2, Sign(vocab=("<minimax:tool_call>",), model_types=("minimax_m2", "minimax"), thinking="<think>")),
    # the template decides between DeepSeek's two call formats (V3-0324 / R1 and V3.1 share a model_type): the
    # older one's writes each call's arguments in a ```json fence after the separator
    (DEEPSEEK_R1, Sign(template=("```json",), also=("<｜tool▁sep｜>",), thinking="<think>")),
    (DEEPSEEK_V3, Sign(vocab=("<｜tool▁calls▁begin｜>",), model_types=("deepseek_v3", "deepseek_v32"), thinking="<think>")),
    (KIMI_K2, Sign(vocab=("<|tool_calls_section_begin|>",), model_types=("kimi_k2",), thinking="<think>")),
    (GPT_OSS, Sign(vocab=("<|channel|>",), also=("<|message|>",), model_types=("gpt_oss",))),
    (GLM, Sign(template=("<arg_key>",), model_prefix="glm4", also=())),
    (QWEN3_CODER, Sign(template=("<function=",), also=("<tool_call>",))),
    (MISTRAL, Sign(vocab=("[TOOL_CALLS]", "[INST]"), model_types=("mistral", "mistral3", "magistral"),
                   thinking="[THINK]")),
    (GEMMA4, Sign(template=("<|tool_call>",), also=("<tool_call|>",))),
    (FUNCTION_GEMMA, Sign(vocab=("<start_function_call>",))),
    (LLAMA3, Sign(vocab=("<|start_header_id|>", "<|python_tag|>"))),
    (GEMMA, Sign(vocab=("<start_of_turn>",), model_prefix="gemma")),
    (QWEN_FAMILY, Sign(vocab=("<tool_call>",), model_prefix="qwen", thinking="<think>")),
]

FAMILIES = {f.name: f for f in [*(row for row, _ in DETECTION), GENERIC]}


def template_source(tokenizer: Any) -> str:
    src = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if isinstance(src, dict):
        src = src.get("default") or next(iter(src.values()), "")
    return src if isinstance(src, str) else ""


def _vocab(tokenizer: Any) -> dict:
    try:
        return tokenizer.get_vocab() if tokenizer is not None else {}
    except Exception:  # a tokenizer without one: the template alone decides
        return {}


def _matches(sign: Sign, src: str, vocab: dict, model_type: str) -> bool:
    def has(*marks: str) -> bool:
        return any(m in src or m in vocab for m in marks)

    if model_type and (model_type in sign.model_types
                       or (sign.model_prefix is not None and model_type.startswith(sign.model_prefix)
                           and (not sign.template or has(*sign.template)))):
        return True
    hit = any(m in src for m in sign.template) or has(*sign.vocab)
    return hit and all(has(m) for m in sign.also)


def detect(tokenizer: Any, config: dict | None = None) -> Family:
    """The family of a model, from its tokenizer (chat template, vocabulary) and config.json."""
    src = template_source(tokenizer)
    vocab = _vocab(tokenizer)
    model_type = str((config or {}).get("model_type", "")).lower()
    fam = next((row for row, sign in DETECTION if _matches(sign, src, vocab, model_type)), None)
    if fam is not None:
        sign = dict((r.name, s) for r, s in DETECTION)[fam.name]
        if sign.thinking and not (sign.thinking in src or sign.thinking in vocab):
            fam = _without_thinking(fam)
    else:
        think = "<think>" in src or "<think>" in vocab
        tools = "<tool_call>" in src or "<tool_call>" in vocab
        fam = replace(GENERIC, markup=replace(PLAIN, think_open="<think>" if think else None,
                                              think_close="</think>" if think else None,
                                              tool_open="<tool_call>" if tools else None,
                                              tool_close="</tool_call>" if tools else None,
                                              # no call markers: the tool preamble asks for a bare JSON call
                                              # ({"name", "arguments"}), so an answer that is one is a call
                                              bare_json=not tools))
    if tokenizer is not None:
        log.info("model family: %s", fam.name)
    return fam

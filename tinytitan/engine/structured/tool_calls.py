"""Forced tool calls: a grammar that admits only calls, in the model family's own markup, to the tools a
request allows, with arguments that match each tool's JSON schema.

Rules:
- The call syntax of the family (``families/syntaxes/``) spells the calls: its ``blocks`` gives the rules of
  one call block (or several when parallel calls are allowed), built from the pieces here (JSON call objects,
  the family's markers around a call) and in ``xml_calls.py`` (argument tags) and ``harmony.py``. A syntax
  without such rules is refused by name (400), never approximated.
- A marker that is one token of the vocabulary is matched as that token (``<[id]>``), else as text.
- A custom tool's input is its one JSON string argument, ``input``: the client's grammar (Lark or regex) is
  rewritten to match the input's JSON-escaped spelling (``escaped.py``), so the input the client reads back
  matches the grammar it sent; a text-format custom tool's input is any text.
- Each candidate function tool's schema goes through the same keyword table as structured output. Under a forced
  call, a keyword the grammar cannot promise is refused by name in a strict tool's schema, and left out of the
  grammar for a tool that is not strict (``loosened``, then what the compiler still refuses: ``best_effort``; the
  API promises its arguments no schema; OpenAI takes such tools under any tool_choice, and LangChain's and the AI
  SDK's structured output force them).
"""

from __future__ import annotations

import dataclasses
import json
import logging

from ...chat_request import Grammar, Tool
from ...errors import ApiError, invalid
from ...output_format import check_schema, loosened
from .best_effort import loosest
from .compile import (NO_VALUE, SPACED, JsonLayout, arguments_schema, compile_grammar, custom_tool_refused,
                      json_rule, unsatisfiable, with_format_patterns)
from .escaped import ANY_TEXT, escaped_lark_rules

log = logging.getLogger("tinytitan.structured")


def marker(text: str, vocab: dict) -> str:
    token = vocab.get(text)
    return f"<[{token}]>" if token is not None else json.dumps(text)


def custom_input_rules(tool: Tool, prefix: str) -> tuple[list[str], str]:
    """Rules for a custom tool's input as written inside its JSON arguments → (rules, start rule)."""
    if tool.input_grammar is None:
        return escaped_lark_rules(Grammar("regex", ANY_TEXT, where="tools"), prefix)
    return escaped_lark_rules(tool.input_grammar, prefix)


def check_custom_grammar(tool: Tool, tokenizer, vocab_size: int | None) -> None:
    """A custom tool's grammar is compiled when the request comes in: one that cannot be is refused by name."""
    rules, start = custom_input_rules(tool, "c")
    compile_grammar(Grammar("lark", "\n".join([f"start: {start}", *rules]), where=tool.input_grammar.where),
                    tokenizer, vocab_size)


def json_call_rules(tools: list[Tool], key: str, loose: bool = False, named: str | None = None,
                    layout: JsonLayout = SPACED) -> tuple[str, list[str]]:
    """``call`` (one call object to any of ``tools``) and its rules; with ``loose``, a function tool that is
    not strict takes any JSON object as its arguments. ``named``: the marker between a call's name and its
    arguments object (Mistral's ``NAME[ARGS]{…}``) instead of a ``{"name": N, key: {…}}`` object. ``layout``:
    the family's own (its template's separators), for the call object and its arguments alike."""
    alternatives, rules = [], []

    def spelled(name: str, args: tuple[str, ...] = ()) -> tuple[str, str]:  # a call's opening, what closes it
        if named is not None:
            return f"{json.dumps(name)} {named}" + (f" {layout.lark(*args)}" if args else ""), ""
        head = layout.lark("{", '"name"', ":", json.dumps(name), ",", json.dumps(key), ":", *args)
        return head, " " + json.dumps("}")

    # every call is spelled from its name on: the calls' opening literals differ only at the name, so the
    # lexer follows them all until it diverges (a %json object beside them would compete for the brace)
    for i, tool in enumerate(t for t in tools if not t.custom):
        schema = {"type": "object"} if loose and not tool.strict else arguments_schema(tool.parameters)
        head, close = spelled(tool.name)
        alternatives.append(f"f{i}")
        rules += [f"f{i}: {head} f{i}_args{close}",
                  f"f{i}_args: {json_rule(schema, layout)}"]
    for i, tool in enumerate(t for t in tools if t.custom):
        # the input is the one string argument, written JSON-escaped: its grammar is rewritten to match that
        input_rules, start = custom_input_rules(tool, f"c{i}")
        head, close = spelled(tool.name, ("{", '"input"', ":", '"'))
        alternatives.append(f"c{i}")
        rules += [f"c{i}: {head} {start} " + json.dumps('"}' if named is not None else '"}}'), *input_rules]
    return "call: " + " | ".join(alternatives), rules


def more_calls(item: str, parallel: bool | int) -> str:
    """What may follow a first call: any number more (``parallel`` True), none (False, 1), or up to N - 1 (a
    turn's call limit: engine/decode/call_limit.py)."""
    if parallel is True:
        return f" ({item})*"
    extra = int(parallel or 1) - 1
    return f" ({item}){{0,{extra}}}" if extra > 0 else ""


def marked_blocks(family, call: str, rules: list[str], parallel: bool | int, vocab: dict,
                  inner: str = '"\\n" call "\\n"') -> list[str]:
    """The rule ``blocks`` for a syntax whose calls stand between the family's markers, a block each (several
    where parallel calls are allowed, at most N where ``parallel`` is a number), around ``call`` and its rules.
    ``inner``: a block's inside."""
    markup = family.markup
    open_ = marker(markup.tool_open, vocab)
    if not markup.tool_close or family.one_call:
        return [f"blocks: {open_} call", call, *rules]
    block = f"block: {open_} {inner} {marker(markup.tool_close, vocab)}"
    return ["blocks: block" + more_calls('"\\n" block', parallel), block, call, *rules]


def section_blocks(family, call: str, rules: list[str], parallel: bool | int, vocab: dict) -> list[str]:
    """The rule ``blocks`` for a syntax whose calls all stand in one section between the family's markers, a
    line each (MiniMax M2's invokes, DeepSeek V3.2's DSML), around ``call`` and its rules."""
    markup = family.markup
    calls = "call" + more_calls('"\\n" call', parallel)
    return [f'blocks: {marker(markup.tool_open, vocab)} "\\n" {calls} "\\n" {marker(markup.tool_close, vocab)}',
            call, *rules]


def auto_call_grammar(family, tools: list[Tool], parallel: bool | int, vocab: dict,
                      start_in_reasoning: bool) -> Grammar | None:
    """Under ``tool_choice: auto``: free text (and a thought) as the model likes, but once it opens a call,
    the call is held to the tool's grammar — a strict function's schema, a custom tool's input grammar —
    and a limit on calls (``parallel`` False or a number) ends the turn after the last one allowed.
    None (logged) when no tool and no limit asks for that, or the family's markers are not single tokens
    (free text could then spell them), or its call syntax has no grammar here for such tools."""
    if not any(t.strict or t.input_grammar is not None for t in tools) and parallel is True:
        return None
    markup, syntax = family.markup, family.syntax
    thinking = bool(markup is not None and markup.think_open and markup.think_close)
    if not _calls_masked_beside_text(family, vocab, thinking):
        if any(t.strict or t.input_grammar is not None for t in tools):
            log.warning("strict tools and tool grammars are not enforced under tool_choice 'auto' for the %s "
                        "family", family.name)
        return None  # a call limit alone is kept by the output parser (engine/decode/call_limit.py)
    check_strict_schemas(tools)
    if thinking:
        close = f"<[{vocab[markup.think_close]}]>"
        think = f"THOUGHT? {close}" if start_in_reasoning else f"(<[{vocab[markup.think_open]}]> THOUGHT? {close})?"
        heads = [f"start: {think} TEXT? blocks?", "THOUGHT: /(?s:.+)/"]
    else:
        heads = ["start: TEXT? blocks?"]
    try:
        blocks = syntax.blocks(family, tools, parallel, vocab, True)
    except ApiError as exc:  # a strict tool the markup cannot hold: not enforced under auto (a forced call refuses)
        log.warning("strict tools are not enforced under tool_choice 'auto' here: %s", exc.message)
        return None
    return Grammar("lark", "\n".join(heads + ["TEXT: /(?s:.+)/"] + blocks), where="tools")


def check_strict_schemas(tools: list[Tool]) -> None:
    """Where a strict function's calls are held to its schema, a keyword the grammar cannot promise is refused
    by name and path, as a forced call's and an output format's are (not left to the grammar compiler)."""
    for tool in tools:
        if not tool.strict or tool.custom:
            continue
        try:
            check_schema(tool.parameters, f"tools.{tool.name}.parameters")
        except ApiError as exc:
            raise invalid(f"'{tool.name}' is a strict tool, whose calls must then match its schema: {exc.message}",
                          param=exc.param, code="unsupported_schema") from None
        at, why = no_value(tool)
        if why:
            raise invalid(f"'{tool.name}' is a strict tool, whose calls must then match its schema: {why}", param=at,
                          code="unsupported_schema")


def no_value(tool: Tool) -> tuple[str, str | None]:
    """The place in a tool's schema where no value can be written and the words for it ((…, None): some value
    can): said before the call grammar's compiler refuses it in its own words, and the whole grammar with them."""
    found = unsatisfiable(tool.parameters)
    at = f"tools.{tool.name}.parameters{found[0] if found else ''}"
    return at, f"{NO_VALUE} at '{at}': {found[1]}" if found else None


def _calls_masked_beside_text(family, vocab: dict, thinking: bool = False) -> bool:
    """Whether the family's calls can be masked beside other output (free text, a thought, a document): its
    syntax has a grammar for them under auto, it allows more than one call, and its markers (a thought's too,
    where ``thinking``) are single tokens, which nothing else the model writes can spell."""
    markup, syntax = family.markup, family.syntax
    if markup is None or not syntax.auto or syntax.blocks is None or family.one_call:
        return False
    markers = [markup.tool_open] + ([markup.tool_close] if markup.tool_close else [])
    if thinking:
        markers += [markup.think_open, markup.think_close]
    return all(m and m in vocab for m in markers)


def forced_call_grammar(family, tools: list[Tool], parallel: bool | int, vocab: dict,
                        start_in_reasoning: bool = False) -> Grammar:
    """A call in the family's syntax; where the prompt already opened a thought (a template that always
    thinks, MiniMax M2), the thought is closed at once."""
    markup, syntax = family.markup, family.syntax
    if syntax.blocks is None or (markup is not None and not markup.tool_open):
        raise invalid(f"A forced tool call (tool_choice) cannot be enforced for this model: its family "
                      f"('{family.name}') writes calls in a markup this server has no call grammar for yet; use "
                      "tool_choice 'auto'", param="tool_choice", code="unsupported_value")
    tools = [t if t.custom or t.strict else dataclasses.replace(
        t, parameters=loosest(loosened(t.parameters), f"tools.{t.name}.parameters")) for t in tools]
    for tool in tools:
        if tool.custom:
            continue
        try:
            check_schema(tool.parameters, f"tools.{tool.name}.parameters")
        except ApiError as exc:
            raise invalid(f"tool_choice forces a call to '{tool.name}', whose arguments must then match its schema: "
                          f"{exc.message}", param="tool_choice", code="unsupported_schema") from None
        if (why := no_value(tool)[1]) is not None:
            raise invalid(f"tool_choice forces a call to '{tool.name}', whose arguments must then match its schema: "
                          f"{why}", param="tool_choice", code="unsupported_schema")
    rules = syntax.blocks(family, tools, parallel, vocab, False)
    return Grammar("lark", "\n".join([f"start: {_thought_closed(markup, vocab, start_in_reasoning)}blocks", *rules]),
                   where="tool_choice")


def _thought_closed(markup, vocab: dict, start_in_reasoning: bool) -> str:
    """The close of a thought the prompt opened, and the blank line templates write after it (MiniMax M2's
    ``</think>\n\n``), if the model writes one."""
    if start_in_reasoning and markup is not None and markup.think_close:
        return marker(markup.think_close, vocab) + ' "\\n"{0,2} '
    return ""


def document_or_calls(grammar: Grammar, family, tools: list[Tool], parallel: bool | int, vocab: dict,
                      start_in_reasoning: bool) -> Grammar | None:
    """An output format (a JSON schema or json_object) beside tools under ``tool_choice: auto`` (an agent
    SDK's typed output with tools): the answer is the document, or the family's calls, each held to its tool's
    grammar where it is strict, as ``auto_call_grammar`` holds them. None (logged) where the family's calls
    have no grammar here or their markers are not single tokens: the document alone is enforced then."""
    markup, syntax = family.markup, family.syntax
    if grammar.kind not in ("json_schema", "json_object") or not _calls_masked_beside_text(family, vocab):
        log.warning("an output format beside tools under tool_choice 'auto': the %s family's calls cannot be "
                    "masked beside the document, so only the document is enforced (no call can be made)",
                    family.name)
        return None
    check_strict_schemas(tools)
    try:
        blocks = syntax.blocks(family, tools, parallel, vocab, True)
    except ApiError as exc:  # a strict tool the markup cannot hold: the document alone
        log.warning("an output format beside tools: only the document is enforced here: %s", exc.message)
        return None
    schema = grammar.source if grammar.kind == "json_schema" else {"type": "object"}
    close = _thought_closed(markup, vocab, start_in_reasoning)
    return Grammar("lark", "\n".join([f"start: {close}(doc | blocks)", f"doc: {json_rule(schema)}", *blocks]),
                   where=grammar.where, name=grammar.name)


def answer_after_thought(grammar: Grammar, family, vocab: dict, start_in_reasoning: bool) -> Grammar:
    """An output format (a JSON schema or json_object) after a prompt that opened a thought: the thought is
    closed at once, then the document (other grammars are kept as they are)."""
    close = _thought_closed(family.markup, vocab, start_in_reasoning)
    if not close or grammar.kind not in ("json_schema", "json_object"):
        return grammar
    schema = grammar.source if grammar.kind == "json_schema" else {"type": "object"}
    return Grammar("lark", "\n".join([f"start: {close}doc", f"doc: {json_rule(with_format_patterns(schema))}"]),
                   where=grammar.where, name=grammar.name)


def pythonic_call_rules(tools: list[Tool], layout: JsonLayout = SPACED) -> tuple[str, list[str]]:
    """``call``: ``NAME(key=value, …)`` to any of ``tools``, keyword arguments in the schema's order (the
    required ones always), each value JSON held to its schema (the family reads JSON's literals as Python's)."""
    alternatives, rules = [], []
    for i, tool in enumerate(tools):
        if tool.custom:
            raise custom_tool_refused(tool.name, "Python calls")
        schema = tool.parameters or {"type": "object"}
        props, required = schema.get("properties") or {}, schema.get("required") or []
        names = [tool.name, *props]
        bad = next((n for n in names if not n.isidentifier()), None)
        if bad is not None or set(required) - set(props):
            raise invalid(f"tool_choice forces a call to '{tool.name}', which this model's Python calls cannot "
                          f"spell: '{bad or sorted(set(required) - set(props))[0]}'", param="tool_choice",
                          code="unsupported_value")
        keys = list(props)
        for j, key in enumerate(keys):  # a_j: the arguments from key j on, none before; r_j: some before
            value = f"f{i}_v{j}"
            rules.append(f"{value}: {json_rule(props[key], layout)}")
            item = f'"{key}=" {value}'
            last = j + 1 == len(keys)
            nxt_a, nxt_r = ('""', '""') if last else (f"f{i}_a{j + 1}", f"f{i}_r{j + 1}")
            if key in required:
                rules += [f"f{i}_a{j}: {item} {nxt_r}", f'f{i}_r{j}: ", " {item} {nxt_r}']
            else:
                rules += [f"f{i}_a{j}: {item} {nxt_r} | {nxt_a}", f'f{i}_r{j}: ", " {item} {nxt_r} | {nxt_r}']
        args = f"f{i}_a0" if keys else ""
        alternatives.append(f"f{i}")
        rules.append(f'f{i}: "{tool.name}(" {args} ")"')
    return "call: " + " | ".join(alternatives), rules

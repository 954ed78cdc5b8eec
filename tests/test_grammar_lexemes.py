"""Which terminals of a custom tool's grammar stay one lexeme inside the call's JSON string
(engine/structured/lexemes.py), and that either way the rewritten grammar admits exactly the escaped texts.

One lexeme is what llguidance's own lexer makes of a terminal (OpenAI runs client grammars on it): a pattern
that may end at almost any character (``(.*a){3}``) is one automaton, not a choice point per character. A
terminal that may hold a character spelt with a backslash, followed by one that may begin with such a
character (``/.+/ LF``), is written character by character: the lexer never backs up, and would hold the
first at the backslash of ``\\n``.
"""

from __future__ import annotations

import json
import re

import pytest

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar
from tinytitan.engine.structured.escaped import escaped_lark_rules
from tinytitan.engine.structured.lexemes import END, follow_sets


def grammar_of(kind: str, source: str) -> str:
    rules, start = escaped_lark_rules(Grammar(kind, source, where="g"), "c")
    return "\n".join([f"start: {start}", *rules])


def lexeme_lines(grammar: str) -> list[str]:
    return [line for line in grammar.splitlines() if line.startswith("C_T")]


def matches(tokenizer, grammar: str, raw: str) -> bool:
    compiled = compile_grammar(Grammar("lark", grammar), tokenizer)
    matcher = compiled.matcher()
    tokens = compiled.tokenizer.tokenize_str(json.dumps(raw, ensure_ascii=False)[1:-1])
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


AMBIGUOUS = ['x"\n\ta' * 30 + "aa", "a" * 3, "no a at the end" + "a" * 2 + "!", "\\a\\a\\a", "é\u2028a" * 50]


@pytest.mark.parametrize("kind,source", [("regex", "(.*a){3}"), ("lark", "start: /(.*a){3}/"),
                                         ("lark", 'start: "<" BODY\nBODY: /(.*a){3}/')])
def test_a_pattern_that_may_end_anywhere_is_one_lexeme_and_exact(demo_tok, kind, source):
    grammar = grammar_of(kind, source)
    assert len(lexeme_lines(grammar)) == 1, grammar
    prefix = "<" if '"<"' in source else ""
    for text in AMBIGUOUS:  # long texts too: no item limit is reached
        assert matches(demo_tok, grammar, prefix + text) is (re.fullmatch("(.*a){3}", text, re.S) is not None
                                                              and "\n" not in text), text[:40]


def test_a_terminal_before_an_escaped_character_is_written_per_character(demo_tok):
    source = 'start: NAME LF VALUE LF\nNAME: /[a-z]+/\nVALUE: /.+/\n%import common.LF'
    grammar = grammar_of("lark", source)
    assert len(lexeme_lines(grammar)) == 1, grammar  # NAME holds no escaped character: one lexeme; VALUE is split
    # (LF, one text, is a string)
    for text, ok in [("key\nsome \"value\"\twith tabs\n", True), ("key\nv\n", True), ("key\n\n", False),
                     ("k1\nv\n", False), ("key\nv\\\n", True), ("key\nv", False)]:
        assert matches(demo_tok, grammar, text) is ok, text


def test_the_apply_patch_lines_stay_per_character(demo_tok):
    from pathlib import Path

    source = (Path(__file__).parent / "data" / "apply_patch.lark").read_text()
    grammar = grammar_of("lark", source)
    # the lines' /(.+)/ and /(.*)/ may hold a tab, and LF follows them: per character; LF is one text, a string
    assert lexeme_lines(grammar) == [] and any(line.endswith(': "\\\\n"') for line in grammar.splitlines()), grammar
    patch = '*** Begin Patch\n*** Add File: a "b".txt\n+\tx = "\\\\"\n*** End Patch\n'
    assert matches(demo_tok, grammar, patch)


@pytest.mark.parametrize("pattern,texts", [("x*", ["", "x", "xxxx"]), (r"(?s:.*)", ["", "a\"b\n\\", "é" * 200])])
def test_a_pattern_that_may_be_empty_is_an_optional_lexeme(demo_tok, pattern, texts):
    grammar = grammar_of("regex", pattern)
    assert len(lexeme_lines(grammar)) == 1 and "C_T0?" in grammar, grammar
    for text in texts:
        assert matches(demo_tok, grammar, text), text
    assert not matches(demo_tok, grammar, "y") or pattern != "x*"


def test_follow_sets_see_through_empty_rules_and_terminals():
    rules = [("start", ["a", "B"]), ("a", ["A", "opt"]), ("opt", []), ("opt", ["E", "C"])]
    follow = follow_sets(rules, {"A", "B", "C", "E"}, empty={"E"}, start_rule="start")
    assert follow["A"] == {"E", "C", "B"}  # opt may be empty; E may be empty, so C follows A too
    assert follow["B"] == {END} and follow["C"] == {"B"}


@pytest.mark.parametrize("source,text", [
    # WORD and TEXT may both begin a line: TEXT (a tab, then LF) is split, and a one-lexeme WORD beside it would
    # win the lexer's greedy race at "abc", then fail at the space; split beside it, both are followed
    ('start: line+\nline: WORD LF | TEXT LF\nWORD: /[a-z]+/\nTEXT: /.+/\n%import common.LF', "abc def\n"),
    # C may follow the split B where B may go on: one lexeme, it would hold "aa" and fail at LF's backslash
    ('start: B C | B LF\nB: /[a\\t]+/\nC: /aa?b/\n%import common.LF', "a\taa\n"),
    # T0 begins where LF does, and LF is followed by one: T0's lexeme would go on at the second LF's backslash
    ('start: T0 | LF LF\nT0: /b?[\\na]./\n%import common.LF', "\n\n"),
])
def test_a_terminal_beside_a_split_one_or_one_followed_by_an_escape_is_split(demo_tok, source, text):
    assert matches(demo_tok, grammar_of("lark", source), text), grammar_of("lark", source)


# Codex's other freeform tools' grammars (its exec and js_repl tools), as it sends them
CODEX_EXEC = r'''
start: pragma_source | plain_source
pragma_source: PRAGMA_LINE NEWLINE SOURCE
plain_source: SOURCE

PRAGMA_LINE: /[ \t]*\/\/ @exec:[^\r\n]*/
NEWLINE: /\r?\n/
SOURCE: /[\s\S]+/
'''
CODEX_JS_REPL = r'''
start: pragma_source | plain_source
pragma_source: PRAGMA_LINE NEWLINE js_source
plain_source: PLAIN_JS_SOURCE

js_source: JS_SOURCE

PRAGMA_LINE: /[ \t]*\/\/ codex-js-repl:[^\r\n]*/
NEWLINE: /\r?\n/
PLAIN_JS_SOURCE: /(?:\s*)(?:[^\s{\"`]|`[^`]|``[^`])[\s\S]*/
JS_SOURCE: /(?:\s*)(?:[^\s{\"`]|`[^`]|``[^`])[\s\S]*/
'''
CODEX_TEXTS = ['// @exec: x\nconsole.log("a\tb")\n', "print(1)", '\t// @exec: y\r\n"q"',
               '// codex-js-repl: timeout_ms=1\nawait f("x")\n', 'const a = "x";\n', "{a:1}", '"s"', "  \n\tlet x",
               "`a`", "``", '// codex-js-repl: t\n"x"', "// codex-js-repl: t\n  {x}", ""]


@pytest.mark.parametrize("source", [CODEX_EXEC, CODEX_JS_REPL], ids=["exec", "js_repl"])
def test_codex_freeform_grammars_admit_what_llguidance_admits_on_the_raw_text(demo_tok, source):
    rewritten = grammar_of("lark", source)
    wrong = []
    compiled = compile_grammar(Grammar("lark", source), demo_tok)
    for text in CODEX_TEXTS:
        matcher = compiled.matcher()
        tokens = compiled.tokenizer.tokenize_str(text)
        raw = matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()
        if matches(demo_tok, rewritten, text) is not raw:
            wrong.append((text, raw))
    assert not wrong, wrong

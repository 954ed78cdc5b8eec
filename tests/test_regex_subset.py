"""The regex subset a custom tool's grammar is rewritten from (engine/structured/regex_subset.py): read
exactly as Python's ``re`` reads it, or refused by name — never widened.

Each supported pattern is checked against Python's own ``re.fullmatch`` (its Unicode classes, as for any str
pattern) on a table of texts, non-ASCII ones among them (``é``, Arabic-Indic ``٣``, a no-break space, ``①``),
through the whole path: the pattern rewritten for the JSON-escaped spelling, compiled by llguidance, and run on
the escaped text.
"""

from __future__ import annotations

import json
import re

import pytest

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar
from tinytitan.engine.structured.escaped import escaped_lark_rules
from tinytitan.errors import ApiError

PATTERNS = [
    r"[a-z]{1,8}\.(txt|py)", r"^\d+$", r"(?s:.)*", r".*", r"[^\n]+", r"\w+\s?\W", r"a|b|", r"(ab)*c?",
    r"x{2,}", r"x{,2}", r"x{2}", r"[\]a-]+", r"[^]]", r"\x41\u00e9\n\t\\\"", r"{a}", r"a{", r"a{1,x}",
    r"\0\012", r"(?P<n>ab)+", r"(?:a|^b)", r"^a|b$", r"\Aa\Z", r"[\s\d]+", r"\D\S", r"a*?b+?", r"(?s)a.b",
    r"a.b", r"a(?#comment)b", r"[\b]", r"\.\-\ \#", r"[a-cx-z]+", r"[^a-z\d]", r"\N{LATIN SMALL LETTER E WITH ACUTE}",
    r"()", r"(a|)+b",
    # the classes and their complements, alone and in sets, negated or not (never wider than re's)
    r"\W", r"\D", r"\S", r"\w+", r"\d+", r"\s+", r"[^\w]", r"[^\d]+", r"[^\s]", r"[^\w\s]+", r"[\W\d]+",
    r"[^\W\d]+", r"[\S]+", r"\w\W",
]
TEXTS = ["", "a", "b", "ab", "abc", "aab", "x", "xx", "xxx", "hello.txt", "readme.md", "a\nb", "a.b", "acb",
         '"', "\\", 'Aé\n\t\\"', "{a}", "a{", "a{1,x}", "\x00\n", "]", "-", "a-]", "12", " 1!", "c", "abab",
         "ababc", "\b", ".- #", "é", "A", "a_1 ", "abx", "zz", "7", "bb", "b\n",
         "٣", "٣4", "\u00a0", "①", "中文", "ß_", "é!", "x\u2003", "\x1c", "\u2028", "²", "Ⅻ", "-é"]


def matches(tokenizer, grammar_text: str, text: str) -> bool:
    compiled = compile_grammar(Grammar("lark", grammar_text), tokenizer)
    matcher = compiled.matcher()
    tokens = compiled.tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_supported_pattern_admits_exactly_what_python_matches(demo_tok, pattern):
    rules, start = escaped_lark_rules(Grammar("regex", pattern, where="g"), "c")
    grammar = "\n".join([f"start: {start}", *rules])
    wrong = []
    for text in TEXTS:
        expected = re.fullmatch(pattern, text) is not None
        if matches(demo_tok, grammar, json.dumps(text, ensure_ascii=False)[1:-1]) is not expected:
            wrong.append((text, expected))
    assert not wrong, wrong


@pytest.mark.parametrize("pattern,needle", [
    (r"\bword\b", "word boundaries"), (r"a\Bb", "word boundaries"), (r"a^b", "anchors inside the pattern"),
    (r"a$b", "anchors inside the pattern"), (r"(a$)+", "anchors"), (r"(a|b^)c", "anchors inside the pattern"),
    (r"a\Zb", "anchors inside the pattern"), (r"a*+", "possessive quantifiers"), (r"a{1,3}+b", "possessive"),
    (r"(?>a*)a", "atomic groups"), (r"(?=a)a", "look-arounds"), (r"(?<!a)b", "look-arounds"),
    (r"(a)\1", "backreferences"), (r"(?P<x>a)(?P=x)", "backreferences"), (r"(?i)a", "flags other than s"),
    (r"(?x: a)", "flags other than s"), (r"(a)?(?(1)b|c)", "conditionals"), (r"a{65}", "repeat counts over 64"),
])
def test_a_construct_that_cannot_be_kept_is_refused_by_name(pattern, needle):
    with pytest.raises(ApiError) as err:
        escaped_lark_rules(Grammar("regex", pattern, where="tools[0].format"), "c")
    assert err.value.code == "unsupported_grammar" and needle in err.value.message, err.value.message
    assert err.value.param == "tools[0].format"


@pytest.mark.parametrize("pattern", [r"a{2,1}", r"[z-a]", r"(", r"a)", r"\q", r"*a", r"[a", r"a**", r"[\d-z]",
                                     r"\x4", r"\N{NO SUCH NAME}"])
def test_a_pattern_that_is_not_a_regex_is_refused_as_invalid(pattern):
    with pytest.raises(re.error):
        re.compile(pattern)  # Python agrees it is not a regex
    with pytest.raises(ApiError) as err:
        escaped_lark_rules(Grammar("regex", pattern, where="g"), "c")
    assert err.value.code == "invalid_grammar", err.value.message


def test_lark_terminals_go_through_the_same_reader(demo_tok):
    with pytest.raises(ApiError) as err:
        escaped_lark_rules(Grammar("lark", 'start: WORD\nWORD: /\\bx+/', where="g"), "c")
    assert "word boundaries" in err.value.message
    rules, start = escaped_lark_rules(Grammar("lark", '%import common.NUMBER\nstart: NUMBER " " NUMBER', where="g"), "c")
    grammar = "\n".join([f"start: {start}", *rules])
    assert matches(demo_tok, grammar, "1.5 2e3") and not matches(demo_tok, grammar, "1.5  2")


def test_the_package_reads_no_private_module_of_re():
    import pathlib

    import tinytitan

    root = pathlib.Path(tinytitan.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if re.search(r"\bre\._|\bsre_(parse|constants|compile)\b", p.read_text())]
    assert not offenders, offenders

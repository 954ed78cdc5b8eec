"""A grammar is translated, checked against the tokenizer and (a client's tool grammar) rewritten once per
source, not on every request: a request with a grammar seen before makes only its own matcher."""

from __future__ import annotations

import llguidance

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import escaped
from tinytitan.engine.structured.compile import compile_grammar

PATCH = 'start: "*** Begin Patch\\n" LINE* "*** End Patch"\nLINE: /[^*\\n][^\\n]*\\n/\n'


class _Spy:
    """llguidance.LLMatcher, counting the grammar checks."""

    def __init__(self, real):
        self.real, self.checks = real, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def __call__(self, *args):
        return self.real(*args)

    def validate_grammar_with_warnings(self, text, tokenizer):
        self.checks.append(text)
        return self.real.validate_grammar_with_warnings(text, tokenizer)


def test_a_grammar_is_checked_once_per_tokenizer(demo_tok, monkeypatch):
    spy = _Spy(llguidance.LLMatcher)
    monkeypatch.setattr(llguidance, "LLMatcher", spy)
    schema = Grammar("json_schema", {"type": "object", "properties": {"cache_test": {"type": "integer"}}},
                     where="response_format")
    first = compile_grammar(schema, demo_tok)
    again = compile_grammar(Grammar("json_schema", dict(schema.source), where="text.format"), demo_tok)
    assert len(spy.checks) == 1 and again.text == first.text
    matcher = again.matcher()  # each request still gets a matcher of its own
    assert matcher.is_accepting() is False and not matcher.is_error()
    other = Grammar("json_schema", {"type": "object", "properties": {"cache_test": {"type": "string"}}})
    compile_grammar(other, demo_tok)
    assert len(spy.checks) == 2  # a new schema is checked


def test_a_client_grammar_is_rewritten_once():
    escaped._lark_rules_cached.cache_clear()
    first = escaped.escaped_lark_rules(Grammar("lark", PATCH, where="tools[0].format"), "c0")
    again = escaped.escaped_lark_rules(Grammar("lark", PATCH, where="tools[0].format"), "c0")
    assert first == again and escaped._lark_rules_cached.cache_info().hits == 1
    again[0].append("mutated")  # a caller's copy: the cached rules stay as they were
    assert escaped.escaped_lark_rules(Grammar("lark", PATCH, where="x"), "c0") == first

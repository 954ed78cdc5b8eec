"""Reasoning levels: every vocabulary onto the ladder the served template renders, logged, never refused."""

from __future__ import annotations

import logging

import pytest

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.prompt.reasoning import SCALE, TemplateReasoning, level_of
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

BINARY = TemplateReasoning(binary=True, ladder=())
LADDER = TemplateReasoning(binary=False, ladder=("low", "medium", "high"))
BOTH = TemplateReasoning(binary=True, ladder=("low", "medium", "high"))
NEITHER = TemplateReasoning(binary=False, ladder=())


@pytest.mark.parametrize("word, binary, rung", [
    ("none", False, "low"), ("off", False, "low"), ("minimal", False, "low"), ("low", True, "low"),
    ("medium", True, "medium"), ("high", True, "high"), ("xhigh", True, "high"), ("ultra", True, "high"),
    ("extra-high", True, "high"), ("Extra High", True, "high"), ("max", True, "high"), (True, True, "medium"),
    (False, False, "low"), ("adaptive", True, "medium"),
])
def test_words_map_onto_the_ladders(word, binary, rung):
    level = level_of(word, None)
    assert BINARY.kwargs(level) == {"enable_thinking": binary}
    assert LADDER.kwargs(level) == {"reasoning_effort": rung}
    assert BOTH.kwargs(level) == {"enable_thinking": binary, "reasoning_effort": rung}


def test_unknown_word_is_not_refused(caplog):
    with caplog.at_level(logging.WARNING):
        assert level_of("galaxy-brain", None) == SCALE["medium"]
    assert "galaxy-brain" in caplog.text


def test_substitution_is_logged(caplog):
    with caplog.at_level(logging.INFO, logger="tinytitan.reasoning"):
        LADDER.kwargs(level_of("xhigh", None))
        NEITHER.kwargs(level_of("high", None))
    assert "rendered as 'high'" in caplog.text and "no reasoning switch" in caplog.text


def test_unset_leaves_the_template_default():
    assert BINARY.kwargs(None) == {} and LADDER.kwargs(None) == {}


def test_template_detection():
    assert TemplateReasoning.of("{% if enable_thinking %}") == BINARY
    assert TemplateReasoning.of("{{ reasoning_effort }}") == LADDER
    assert TemplateReasoning.of("plain") == NEITHER


def _prompt(backend, **kw):
    req = ChatRequest(model="m", messages=(Message("user", "hi"),), **kw)
    return backend.prepare(req).prompt_text


@pytest.mark.parametrize("default, request_level, thinking", [
    (None, None, True),   # the demo template's own default: thinking on
    (False, None, False),  # --thinking off
    ("none", None, False),  # --reasoning-effort none
    (False, "high", True),  # a request overrides the server default
    (True, "none", False),
])
def test_server_default_and_request_level_reach_the_template(demo_tok, default, request_level, thinking):
    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id="m")
    backend.default_reasoning = default
    text = _prompt(backend, reasoning=request_level)
    assert text.endswith("<think>\n\n</think>\n\n") != thinking


def test_budget_is_logged_not_enforced(demo_tok, caplog):
    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id="m")
    with caplog.at_level(logging.INFO, logger="tinytitan.backend"):
        _prompt(backend, reasoning="high", reasoning_budget_tokens=2048)
    assert "2048" in caplog.text and "not enforced" in caplog.text

"""JSON strings keep the ``\\u`` escape wherever no object admits extra keys beside declared ones: it is the
only way to write a control character other than \\b \\f \\n \\r \\t. A schema whose const/enum/pattern holds one
(the ESC of an ANSI colour, a Ctrl-C for a terminal tool) gets a document that holds to it, and a pattern of one
is no grammar that admits nothing."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar
from grammar_walk import forced_document


@pytest.mark.parametrize("schema", [
    {"type": "string", "const": "a\u0003b"},
    {"type": "object", "properties": {"key": {"const": "\u0003"}}, "required": ["key"], "additionalProperties": False},
])
def test_a_const_with_a_control_character_is_written_as_the_schema_says(schema, demo_tok):
    doc = forced_document(schema, demo_tok)
    jsonschema.validate(json.loads(doc), schema)


def test_a_pattern_of_a_control_character_is_not_refused(demo_tok):
    compile_grammar(Grammar("json_schema", {"type": "string", "pattern": "^\\u0003$"}), demo_tok)

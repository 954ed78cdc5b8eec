"""A format that is not strict, held to as much of its schema as the grammar compiler takes.

Rules:
- A strict format is compiled as sent, and what the compiler refuses is the client's 400, named (compile.py).
  A format that is not strict (``Grammar.loose``: already ``output_format.loosened``) asks for best effort, as
  OpenAI holds such a format to no schema and Ollama's schema-to-grammar skips what it cannot express: where
  the compiler still refuses its schema, it is loosened step by step, each step chosen by the compiler's own
  words and only ever admitting more values, until it compiles: a ``pattern`` the compiler cannot read
  (a look-around, a back-reference, ``\\b``) is dropped, its string's type and lengths kept; a ``oneOf`` the
  compiler cannot prove exclusive is read as ``anyOf``; ``minProperties``/``maxProperties`` beside properties
  not all required, the keywords beside a circular ``$ref``, number bounds whose range the compiler cannot write
  (``[1e19, 1e20]``), a ``multipleOf`` of too many digits, a keyword the compiler names as unimplemented are
  dropped. Anything else: the schema's own type alone (any JSON object where it names none, as ``json_object``).
  A forced call to a tool that is not strict gets the same (tool_calls.py).
- A schema no value can match (``Unsatisfiable schema``) is not loosened: the compiler's refusal stands, named,
  as for a reference that comes back to itself (output_format's check).
- The steps read the schema alone, never the tokenizer: the outcome is the same for every model, worked out once
  per distinct schema (an LRU of ``CACHE_SIZE``, beside the compiled grammars' own) and logged at info once.
  Nothing is said to the client: OpenAI says nothing either, and no SDK's model has a field for it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any

from ...chat_request import Grammar
from ...output_format import ANNOTATIONS, keywords
from .compile import CACHE_SIZE, schema_fault
from ...memo import BoundedMemo

log = logging.getLogger("tinytitan.structured")

_done: BoundedMemo[str, tuple[Any, tuple[str, ...]]] = BoundedMemo(CACHE_SIZE)  # schema's JSON -> compilable's


def best_effort(grammar: Grammar) -> Grammar:
    """``grammar``, its schema loosened until the compiler takes it where it is not strict (else as it is)."""
    if not grammar.loose or grammar.kind != "json_schema":
        return grammar
    schema = loosest(grammar.source, grammar.where or "schema")
    return grammar if schema is grammar.source else dataclasses.replace(grammar, source=schema)


def loosest(schema: Any, where: str) -> Any:
    """``schema`` (not strict, named ``where`` in the log) as ``compilable`` makes it, worked out once (the LRU)."""
    hit = _done.recall(json.dumps(schema, ensure_ascii=False), lambda: _loosened(schema, where))
    return schema if not hit[1] else hit[0]


def _loosened(schema: Any, where: str) -> tuple[Any, tuple[str, ...]]:
    """``compilable``'s answer, what it left out logged (once per schema: ``loosest`` remembers it)."""
    hit = compilable(schema, where)
    if hit[1]:
        log.info("a schema that is not strict, at '%s', is loosened to what the grammar can hold: %s", where,
                 "; ".join(hit[1]))
    return hit


def compilable(schema: Any, where: str = "schema") -> tuple[Any, tuple[str, ...]]:
    """``schema`` (the request's ``where``) loosened step by step until the compiler takes it, and what each step
    left out, by path (nothing: as it is). A schema no value matches comes back as it is (the compiler refuses it,
    named)."""
    notes: list[str] = []
    for _ in range(2 * len(STEPS)):  # (each step answers one kind of fault, and can answer it once)
        fault = schema_fault(schema)
        if fault is None or "Unsatisfiable" in fault:
            return schema, tuple(notes)
        for trigger, step in STEPS:
            loosened, said = step(schema, fault, where) if trigger in fault else (schema, [])
            if said:
                schema, notes = loosened, notes + said
                break
        else:
            break
    fault = schema_fault(schema)  # (the last step may have been the one it needed)
    if fault is None:
        return schema, tuple(notes)
    kind = schema.get("type", "object") if isinstance(schema, dict) else "object"
    notes.append(f"the compiler cannot take the schema ({fault}): held to its type, {json.dumps(kind)}, alone")
    return {"type": kind}, tuple(notes)


def _rewrite(schema: Any, each, at: str) -> Any:
    """``schema`` with ``each(node, at)`` applied to every schema object in it, outermost first (``at``: its path)."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value, shape in keywords(each(schema, at)):
        if shape == "one":
            value = _rewrite(value, each, f"{at}.{key}")
        elif shape == "list" and isinstance(value, list):
            value = [_rewrite(v, each, f"{at}.{key}[{i}]") for i, v in enumerate(value)]
        elif shape == "map" and isinstance(value, dict):
            value = {name: _rewrite(v, each, f"{at}.{key}.{name}") for name, v in value.items()}
        out[key] = value
    return out


def _dropping(test, what: str):
    """A step that drops from each schema object the keywords ``test(node, key)`` names, saying ``what``."""
    def step(schema: Any, fault: str, where: str) -> tuple[Any, list[str]]:
        said: list[str] = []

        def each(node: dict, at: str) -> dict:
            gone = [k for k in node if test(node, k, fault)]
            said.extend(f"{at}.{k} {what}" for k in gone)
            return {k: v for k, v in node.items() if k not in gone}
        return _rewrite(schema, each, where), said
    return step


def _unreadable(keyword: str, kind: str):
    def test(node: dict, key: str, fault: str) -> bool:
        return key == keyword and schema_fault({"type": kind, keyword: node[key]}) is not None
    return test


def _counts(node: dict, key: str, fault: str) -> bool:
    props, required = node.get("properties"), node.get("required")
    return key in ("minProperties", "maxProperties") and isinstance(props, dict) and not (
        isinstance(required, list) and set(props) <= set(required))


def _beside_circular(node: dict, key: str, fault: str) -> bool:
    target = fault.rpartition("json-schema:///")[2].strip()
    return node.get("$ref") == target and key not in ANNOTATIONS | {"$ref", "$defs", "definitions"}


BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _unwritable_range(node: dict, key: str, fault: str) -> bool:
    kind = "integer" if node.get("type") == "integer" else "number"
    return key in BOUNDS and schema_fault({"type": kind, **{k: node[k] for k in BOUNDS if k in node}}) is not None


def _named(node: dict, key: str, fault: str) -> bool:
    named = re.search(r"Unimplemented keys: (\[.*?\])", fault)
    try:
        return named is not None and key in json.loads(named.group(1))
    except ValueError:
        return False


def _one_of(schema: Any, fault: str, where: str) -> tuple[Any, list[str]]:
    said: list[str] = []

    def each(node: dict, at: str) -> dict:
        if "oneOf" not in node:
            return node
        said.append(f"{at}.oneOf read as anyOf (its branches may overlap)")
        return {("anyOf" if k == "oneOf" else k): v for k, v in node.items() if k != "anyOf"} | (
            {"allOf": [*node.get("allOf", []), {"anyOf": node["anyOf"]}]} if "anyOf" in node else {})
    return _rewrite(schema, each, where), said


# (words in the compiler's refusal, the step that answers them)
STEPS = (
    ("regex", _dropping(_unreadable("pattern", "string"), "dropped (a pattern the compiler cannot read)")),
    ("oneOf", _one_of),
    ("min/maxProperties", _dropping(_counts, "dropped (beside properties not all required)")),
    ("circular references with sibling keys", _dropping(_beside_circular, "dropped (beside a circular $ref)")),
    ("Failed to generate regex for", _dropping(_unwritable_range, "dropped (a range the compiler cannot write)")),
    ("multipleOf", _dropping(_unreadable("multipleOf", "number"), "dropped (too many digits)")),
    ("Unimplemented keys", _dropping(_named, "dropped (not implemented by the compiler)")),
)

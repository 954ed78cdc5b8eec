"""Is a request field's ``schema`` a valid JSON Schema 2020-12 document? The answer jsonschema's
``Draft202012Validator.check_schema`` gives (the same first error, in the same words, at the same place), without
its cost.

Rules:
- The 2020-12 meta-schema is seven vocabulary meta-schemas joined by ``allOf``, each reaching into subschemas
  through ``$dynamicRef: "#meta"``. jsonschema resolves that reference through the dynamic scope at every
  subschema it enters: checking the 37 field schemas of spec/ took about 0.7 s of the 1.2 s the protocols took
  to build, at every server start (2 shared cores).
- A schema checked against the meta-schema itself (not an extension of it) has every ``#meta`` resolve to that
  one outermost meta-schema. So the meta-schema is rewritten once, in memory, into one object: each ``$ref`` and
  ``$dynamicRef`` replaced by the object it names (``#meta`` by the whole: an object that contains itself), and
  the vocabularies' ``allOf`` merged into one ``properties`` table (each keyword belongs to one vocabulary, and
  all have the same ``type``), in the order the ``allOf`` lists them, so errors come in the same order. The
  identifiers (``$id``, ``$schema``, ``$dynamicAnchor``, ``$vocabulary``) go: nothing is left to resolve. The
  format checker is the one ``check_schema`` uses (``pattern`` is checked as a regex, as before).
- The rewriting reads only the published meta-schemas (jsonschema's ``META_SCHEMA`` and the registry of
  jsonschema-specifications) and knows each keyword's shape: a meta-schema it does not recognise (a later release
  of either package) makes ``check`` use ``check_schema`` itself, slower and the same.
  tests/test_spec_meta_check.py holds the rewriting in use and the two agreeing on thousands of broken schemas.
"""

from __future__ import annotations

import functools
import logging
from typing import Any
from urllib.parse import urljoin

import jsonschema
import jsonschema_specifications

log = logging.getLogger("tinytitan.speclang")

DRAFT = jsonschema.Draft202012Validator
IDENTIFIERS = frozenset({"$id", "$schema", "$dynamicAnchor", "$vocabulary"})
ONE = frozenset({"additionalProperties", "items", "contains", "propertyNames", "if", "then", "else", "not",
                 "unevaluatedItems", "unevaluatedProperties", "contentSchema"})  # a subschema
LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})  # a list of subschemas
MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})  # name → subschema
PLAIN = frozenset({"type", "enum", "const", "format", "pattern", "minimum", "maximum", "exclusiveMinimum",
                   "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
                   "minProperties", "maxProperties", "required", "dependentRequired", "default", "deprecated",
                   "title", "description", "$comment", "examples", "readOnly", "writeOnly"})  # no subschema
MERGEABLE = frozenset({"type", "properties", "$defs", "title", "$comment"})  # what a vocabulary holds


class Unrecognised(ValueError):
    """The meta-schema is not shaped as this module knows it."""


def _pointer(document: Any, fragment: str) -> Any:
    node = document
    for part in (p for p in fragment.split("/") if p):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def rewritten() -> dict:
    """The 2020-12 meta-schema as one self-containing object (see the rules); raises ``Unrecognised``."""
    root = DRAFT.META_SCHEMA["$id"]
    done: dict[tuple[str, str], dict] = {}  # (document, fragment) → its rewriting (filled in as it is made)

    def target(uri: str, fragment: str) -> Any:
        try:
            return _pointer(jsonschema_specifications.REGISTRY.contents(uri), fragment)
        except (LookupError, TypeError) as exc:
            raise Unrecognised(f"cannot resolve {uri}#{fragment}: {exc}") from None

    def schema(node: Any, base: str, key: tuple[str, str] | None = None) -> Any:
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            raise Unrecognised(f"a subschema that is a {type(node).__name__}")
        if key is not None and key in done:
            return done[key]
        out: dict = {}
        if key is not None:
            done[key] = out
        base = urljoin(base, node.get("$id", ""))
        for name, value in node.items():
            if name in IDENTIFIERS:
                continue
            if name in ("$ref", "$dynamicRef"):
                if name == "$dynamicRef" and value != "#meta":
                    raise Unrecognised(f"$dynamicRef {value!r}")
                uri, _, fragment = (root if name == "$dynamicRef" else urljoin(base, value)).partition("#")
                if "allOf" in node:
                    raise Unrecognised(f"{name} beside allOf")
                out["allOf"] = [schema(target(uri, fragment), uri, (uri, fragment))]
            elif name in ONE:
                out[name] = schema(value, base)
            elif name in LIST:
                out[name] = [schema(v, base) for v in value]
            elif name in MAP:
                out[name] = {k: schema(v, base) for k, v in value.items()}
            elif name in PLAIN:
                out[name] = value
            else:
                raise Unrecognised(f"keyword {name!r}")
        if key is None and list(out) == ["allOf"] and len(out["allOf"]) == 1:
            return out["allOf"][0]  # (a bare reference: the object it names)
        return out

    top = schema(DRAFT.META_SCHEMA, root, (root, ""))
    _merge_vocabularies(top)
    return top


def _merge_vocabularies(top: dict) -> None:
    """``top``'s ``allOf`` of vocabularies, each a ``type`` and a ``properties`` table, made one table (in place:
    every ``#meta`` inside is this very object)."""
    parts = top.get("allOf") or []
    for part in [*parts, top]:
        if not isinstance(part, dict) or set(part) - MERGEABLE - ({"allOf"} if part is top else set()) \
                or part.get("type", top.get("type")) != top.get("type"):
            raise Unrecognised("a vocabulary that is not a type and a properties table")
    properties: dict = {}
    for part in [*parts, top]:
        for name, sub in (part.get("properties") or {}).items():
            if name in properties:
                raise Unrecognised(f"{name!r} in two vocabularies")
            properties[name] = sub
    merged = {"type": top["type"], "properties": properties}
    top.clear()
    top.update(merged)


@functools.lru_cache(maxsize=1)
def _validator():
    try:
        return DRAFT(rewritten(), format_checker=DRAFT.FORMAT_CHECKER)
    except Unrecognised as exc:
        log.debug("field schemas are checked by jsonschema's check_schema: the meta-schema is new here (%s)", exc)
        return None


def check(schema: Any) -> None:
    """Raise ``jsonschema.SchemaError`` where ``schema`` is not a valid 2020-12 schema, as ``check_schema``."""
    validator = _validator()
    if validator is None:
        DRAFT.check_schema(schema)
        return
    for error in validator.iter_errors(schema):
        raise jsonschema.SchemaError.create_from(error)

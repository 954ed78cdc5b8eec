"""Structured output: the protocols' spellings of an output format, one form, one keyword table.

Rules:
- Every spelling (Chat Completions ``response_format``, Responses ``text.format``, Messages
  ``output_config.format`` and the older ``output_format``, Ollama's ``format``) is turned into a
  ``Grammar`` (or None for plain text) by ``normalise`` before anything else looks at it.
- ``{"type": "text"}`` is plain text; ``json_object`` is any JSON object; ``json_schema`` is its schema.
- A schema keyword is supported (the grammar enforces it), an annotation (accepted, changes nothing), or one the
  grammar cannot promise. A strict format (``strict: true``; Messages' formats, which are always strict) is never
  loosened: such a keyword, an unknown one too, is refused by name with the path where it stands. A format that
  is not strict (``strict`` false or absent, OpenAI's default on Chat and Responses; Ollama's ``format`` and
  llama.cpp's spelling, which have no flag) is held to what the grammar can promise and the rest is left out
  (``loosened``), as for a forced call to a tool that is not strict: OpenAI holds such a format to no schema,
  and Ollama's schema-to-grammar skips what it cannot express.
- No I/O and no engine: the engine compiles what this module let through. What its grammar compiler still
  cannot take (a look-around in a ``pattern``, a ``oneOf`` whose branches may overlap) is refused by name in a
  strict format, and loosened further in one that is not (``Grammar.loose``: engine/structured/best_effort.py).
"""

from __future__ import annotations

import json
from typing import Any

from .chat_request import Grammar
from .errors import invalid

# keywords the grammar enforces
SUPPORTED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minProperties", "maxProperties",
})
# keywords that describe and constrain nothing
ANNOTATIONS = frozenset({
    "title", "description", "examples", "default", "$schema", "$comment", "$id", "deprecated", "readOnly",
    "writeOnly",
})
# keywords the grammar cannot promise, with the reason a client is told
REFUSED = {
    "not": "a negation cannot be enforced token by token",
    "if": "conditional schemas are not enforced", "then": "conditional schemas are not enforced",
    "else": "conditional schemas are not enforced",
    "uniqueItems": "unique array items cannot be enforced token by token",
    "contains": "'contains' is not enforced", "minContains": "'contains' is not enforced",
    "maxContains": "'contains' is not enforced",
    "dependentRequired": "dependencies between properties are not enforced",
    "dependentSchemas": "dependencies between properties are not enforced",
    "dependencies": "dependencies between properties are not enforced",
    "propertyNames": "property-name schemas are not enforced",
    "patternProperties": "pattern properties are not enforced",
    "unevaluatedProperties": "unevaluated properties are not enforced",
    "unevaluatedItems": "unevaluated items are not enforced",
    "additionalItems": "use 'prefixItems' and 'items' (2020-12), or an array of schemas in 'items' beside it "
                       "(draft-07)",
    "$dynamicRef": "dynamic references are not resolved", "$dynamicAnchor": "dynamic references are not resolved",
    "$recursiveRef": "dynamic references are not resolved", "$recursiveAnchor": "dynamic references are not resolved",
    "$anchor": "only '#/…' references are resolved", "$vocabulary": "vocabularies are not configurable",
    "contentEncoding": "encoded content is not enforced", "contentMediaType": "encoded content is not enforced",
    "contentSchema": "encoded content is not enforced",
}
FORMATS = ("date", "date-time", "time", "duration", "uuid", "email", "hostname", "ipv4", "ipv6")
TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
# keyword -> how its value holds subschemas: "one" schema, "list" of schemas, "map" of named schemas
SUBSCHEMAS = {"properties": "map", "$defs": "map", "definitions": "map", "additionalProperties": "one",
              "items": "one", "prefixItems": "list", "anyOf": "list", "oneOf": "list", "allOf": "list"}
MAX_DEPTH = 64  # deeper schemas are refused (the compiler and the template recurse)
# OpenAPI's hint beside a union (pydantic writes it for Field(discriminator=...)): which property names the branch.
# It never changes what validates (the branches' own consts decide), so it is an annotation, its shape checked
HINTS = frozenset({"discriminator"})


def _discriminator_shaped(value: Any) -> bool:
    mapping = value.get("mapping", {}) if isinstance(value, dict) else None
    return (isinstance(value, dict) and isinstance(value.get("propertyName"), str)
            and not set(value) - {"propertyName", "mapping"} and isinstance(mapping, dict)
            and all(isinstance(v, str) for v in mapping.values()))


def _check_discriminator(value: Any, at: str) -> None:
    if not _discriminator_shaped(value):
        raise invalid(f"Invalid schema at '{at}': a discriminator is an object with a string 'propertyName' "
                      f"and an optional 'mapping' of strings", param=at, code="invalid_schema")


def vacuous_property_names(value: Any) -> bool:
    """A ``propertyNames`` every JSON key satisfies: ``true``, ``{}`` or ``{"type": "string"}`` (annotations
    aside). Zod writes the last for every ``z.record(z.string(), …)``; it constrains nothing, so it is taken
    (and left out of the grammar) where any other property-name schema is refused."""
    if value is True:
        return True
    return (isinstance(value, dict) and set(value) <= ANNOTATIONS | {"type"}
            and value.get("type", "string") == "string")


KINDS = ("text", "json_object", "json_schema")


def normalise(fmt: Any, where: str, kinds: tuple[str, ...] = KINDS, strict: bool = False) -> Grammar | None:
    """Any protocol's output format object (named ``where`` in errors) → a Grammar, or None for text.

    Two shapes are read: OpenAI Chat's (``{"type": "json_schema", "json_schema": {"name", "schema",
    "strict"}}``) and the flat one of Responses and Messages (``{"type": "json_schema", "name", "schema"}``);
    and llama.cpp's ``{"type": "json_object", "schema": {…}}``, a schema its clients send to Chat.
    ``kinds``: the types the protocol takes (Messages takes only ``json_schema``). ``strict``: every format of
    the protocol is strict (Messages); otherwise the format's own ``strict`` decides, and one that is not
    strict has its schema ``loosened``.
    """
    if not isinstance(fmt, dict):
        raise invalid(f"Invalid type for '{where}': expected an object", param=where, code="invalid_type")
    kind = fmt.get("type")
    if kind not in kinds:
        raise invalid(f"Invalid value for '{where}.type': {json.dumps(kind)} is not one of {list(kinds)}",
                      param=f"{where}.type", code="invalid_value")
    if kind == "text":
        return None
    # llama.cpp's spelling of a schema (an empty or null one is its 'any object', as no schema is)
    if kind == "json_object" and isinstance(fmt.get("schema"), dict) and fmt["schema"]:  # (it has no strict flag)
        schema = fmt["schema"] if strict else loosened(fmt["schema"])
        check_schema(schema, f"{where}.schema")
        return Grammar("json_schema", schema, where=f"{where}.schema", loose=not strict)
    if kind == "json_object":
        return Grammar("json_object", {"type": "object"}, where=where)
    inner, inner_where = fmt, where
    if isinstance(fmt.get("json_schema"), dict):  # Chat Completions nests the schema one level down
        inner, inner_where = fmt["json_schema"], f"{where}.json_schema"
    if "schema" not in inner:
        raise invalid(f"Missing required parameter: '{inner_where}.schema'", param=f"{inner_where}.schema",
                      code="missing_required_parameter")
    flag = inner.get("strict")
    if flag is not None and not isinstance(flag, bool):
        raise invalid(f"Invalid type for '{inner_where}.strict': expected a boolean", param=f"{inner_where}.strict",
                      code="invalid_type")
    name = inner.get("name")
    if name is not None and not isinstance(name, str):
        raise invalid(f"Invalid type for '{inner_where}.name': expected a string", param=f"{inner_where}.name",
                      code="invalid_type")
    description = inner.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid(f"Invalid type for '{inner_where}.description': expected a string",
                      param=f"{inner_where}.description", code="invalid_type")
    schema = inner["schema"] if strict or flag else loosened(inner["schema"])
    check_schema(schema, f"{inner_where}.schema")
    return Grammar("json_schema", schema, name, where=f"{inner_where}.schema", description=description or None,
                   loose=not (strict or flag))


def normalise_ollama(fmt: Any, where: str = "format") -> Grammar | None:
    """Ollama's ``format``: ``"json"`` (any JSON value — an object here, as Ollama's own models answer), a
    JSON schema object (``loosened``: it has no strict flag, and Ollama skips what its grammar cannot say), or
    empty for text."""
    if fmt in (None, ""):
        return None
    if fmt == "json":
        return Grammar("json_object", {"type": "object"})
    if isinstance(fmt, dict):
        schema = loosened(fmt)
        check_schema(schema, where)
        return Grammar("json_schema", schema, where=where, loose=True)
    raise invalid(f"Invalid value for '{where}': {json.dumps(fmt)}; send \"json\" or a JSON schema object",
                  param=where, code="invalid_value")


def check_schema(schema: Any, where: str, depth: int = 0, refs: list | None = None) -> None:
    """Refuse, by name and path, every keyword the grammar cannot promise (see the tables above), and a
    reference that comes back to itself (``_check_references``). ``refs``: the walk's ``$ref``s, with their
    paths, as it finds them (made by the outermost call, which checks them once the walk is done)."""
    outermost = refs is None
    refs = [] if outermost else refs
    _check_keywords(schema, where, depth, refs)
    if outermost:
        _check_references(schema, refs)


def keywords(schema: dict):
    """Each keyword of ``schema`` with the shape its value has as subschemas: "one", "list", "map" (subschemas
    as its values, never its names), or None (no subschema: a const, an enum); a draft-07 tuple's ``items``
    array and its ``additionalItems`` included, which the compiler reads as written, whatever ``$schema`` says."""
    tuple_items = isinstance(schema.get("items"), list)
    for key, value in schema.items():
        yield key, value, ("list" if key == "items" and tuple_items else "one" if key == "additionalItems"
                           else SUBSCHEMAS.get(key))


def map_subschemas(value: Any, shape: str | None, fn) -> Any:
    """A keyword's ``value`` (of that ``shape``: ``keywords``) with ``fn`` applied to each of its subschemas."""
    if shape == "one":
        return fn(value)
    if shape == "list" and isinstance(value, list):
        return [fn(v) for v in value]
    if shape == "map" and isinstance(value, dict):
        return {name: fn(v) for name, v in value.items()}
    return value


def loosened(schema: Any) -> Any:
    """``schema`` less what the grammar cannot promise: the refused and unknown keywords, the formats not
    enforced (each dropped keyword only narrowed the values; with ``patternProperties`` goes the
    ``additionalProperties`` it qualified). Every value the schema takes, the loosened one takes too. For a call
    forced to a tool that is not strict, and an output format that is not strict: the API holds neither to its
    schema, so a keyword past the grammar is the client's to check, not a reason to refuse the request. A
    ``$ref`` that no longer names a subschema of what is left (its target went with a keyword, or is in another
    document) goes too."""
    out = _walk(schema, _loose)
    return _walk(out, lambda node: {k: v for k, v in node.items() if k != "$ref" or (
        isinstance(v, str) and (v == "#" or v.startswith("#/")) and _pointed(out, v) is not None)})


def _loose(schema: dict) -> dict:
    out = {key: value for key, value in schema.items()
           if not (key in REFUSED or key not in SUPPORTED | ANNOTATIONS | HINTS
                   or (key == "format" and value not in FORMATS) or (key in HINTS and not _discriminator_shaped(value)))
           or (key == "additionalItems" and isinstance(schema.get("items"), list))}  # (a draft-07 tuple's rest)
    if "patternProperties" in schema:
        out.pop("additionalProperties", None)
    return out


def _walk(schema: Any, each: Any) -> Any:
    """``schema`` with ``each`` applied to each schema object in it, outermost first: its subschemas only, never a
    ``const``'s, an ``enum``'s or a ``default``'s value."""
    if not isinstance(schema, dict):
        return schema
    return {key: map_subschemas(value, shape, lambda sub: _walk(sub, each))
            for key, value, shape in keywords(each(schema))}


def _pointed(root: Any, ref: str) -> Any:
    """The subschema a local reference (``#`` or ``#/…``) names; None where it names none."""
    from urllib.parse import unquote

    node = root
    for part in ref[2:].split("/") if ref != "#" else ():
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _finite(node: Any, ok: set[str]) -> bool:
    """Whether ``node`` admits a finite value, given that the references in ``ok`` do: its own ``$ref``, every
    member of its ``allOf``, one branch at least of its ``anyOf`` / ``oneOf``, and what it must contain (the
    required properties of a value that can only be an object, the first ``minItems`` items of one that can only
    be an array). Anything else (a type list with another type, an optional property) is a way out."""
    if not isinstance(node, dict) or "enum" in node or "const" in node:
        return True
    if isinstance(node.get("$ref"), str) and node["$ref"] not in ok:
        return False
    if not all(_finite(m, ok) for m in (node["allOf"] if isinstance(node.get("allOf"), list) else ())):
        return False
    for choice in ("anyOf", "oneOf"):
        if isinstance(node.get(choice), list) and node[choice] and not any(_finite(m, ok) for m in node[choice]):
            return False
    kind = node.get("type")
    kind = kind[0] if isinstance(kind, list) and len(kind) == 1 else kind
    if kind == "object" and isinstance(node.get("required"), list) and isinstance(node.get("properties"), dict):
        return all(_finite(node["properties"].get(name), ok) for name in node["required"] if isinstance(name, str))
    least = node.get("minItems")
    if kind == "array" and isinstance(least, int) and not isinstance(least, bool) and least >= 1:
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        return all(_finite(sub, ok) for sub in prefix[:least]) and (least <= len(prefix)
                                                                     or _finite(node.get("items"), ok))
    return True


def _check_references(schema: Any, refs: list[tuple[str, str]]) -> None:
    """A reference whose every value must hold (``_finite``) a value of a reference that comes back to itself
    admits no finite value: refused, named (its first place). The references that admit one are found as a
    grammar's productive symbols are: those that do given the ones found so far, until no more are (a missing
    target admits any value: the grammar compiler names it)."""
    ok: set[str] = set()
    pending = list(dict.fromkeys(ref for _, ref in refs))
    while True:
        found = [ref for ref in pending if _finite(_pointed(schema, ref), ok)]
        if not found:
            break
        ok.update(found)
        pending = [ref for ref in pending if ref not in ok]
    for at, ref in refs:
        if ref not in ok:
            raise invalid(f"Invalid schema at '{at}': the reference {json.dumps(ref)} comes back to itself through "
                          "what every value must hold (its $ref, allOf, every branch of an anyOf or oneOf, required "
                          "properties, the first minItems items), so no finite value can match it", param=at,
                          code="invalid_schema")


def _check_keywords(schema: Any, where: str, depth: int, refs: list) -> None:
    if depth > MAX_DEPTH:
        raise invalid(f"The schema at '{where}' is nested more than {MAX_DEPTH} levels deep", param=where,
                      code="invalid_schema")
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise invalid(f"Invalid schema at '{where}': expected an object or a boolean", param=where,
                      code="invalid_schema")
    tuple_items = isinstance(schema.get("items"), list)  # draft-07's tuple: items, then additionalItems
    if tuple_items and "prefixItems" in schema:
        raise invalid(f"Invalid schema at '{where}.items': an array of schemas (draft-07) beside 'prefixItems' "
                      f"(2020-12); use one spelling", param=f"{where}.items", code="invalid_schema")
    for key, value in schema.items():
        at = f"{where}.{key}"
        if key == "propertyNames" and vacuous_property_names(value):
            continue
        if key == "items" and tuple_items:
            _check_value("prefixItems", value, at, depth, refs)
            continue
        if key == "additionalItems" and tuple_items:
            check_schema(value, at, depth + 1, refs)
            continue
        if key in REFUSED:
            raise invalid(f"JSON schema keyword '{key}' at '{at}' is not supported: {REFUSED[key]}", param=at,
                          code="unsupported_schema")
        if key in ANNOTATIONS:
            continue
        if key in HINTS:
            _check_discriminator(value, at)
            continue
        if key not in SUPPORTED:
            raise invalid(f"JSON schema keyword '{key}' at '{at}' is not supported: structured output here "
                          f"enforces {', '.join(sorted(SUPPORTED))}", param=at, code="unsupported_schema")
        _check_value(key, value, at, depth, refs)


def _check_value(key: str, value: Any, at: str, depth: int, refs: list) -> None:
    shape = SUBSCHEMAS.get(key)
    if shape == "one":
        check_schema(value, at, depth + 1, refs)
    elif shape == "list":
        if not isinstance(value, list) or (key != "prefixItems" and not value):
            raise invalid(f"Invalid schema at '{at}': expected a non-empty array of schemas", param=at,
                          code="invalid_schema")
        for i, sub in enumerate(value):
            check_schema(sub, f"{at}[{i}]", depth + 1, refs)
    elif shape == "map":
        if not isinstance(value, dict):
            raise invalid(f"Invalid schema at '{at}': expected an object of schemas", param=at, code="invalid_schema")
        for name, sub in value.items():
            check_schema(sub, f"{at}.{name}", depth + 1, refs)
    elif key == "type":
        kinds = value if isinstance(value, list) else [value]
        for kind in kinds:
            if kind not in TYPES:
                raise invalid(f"Invalid schema at '{at}': type {json.dumps(kind)} is not one of {list(TYPES)}",
                              param=at, code="invalid_schema")
    elif key == "format":
        if value not in FORMATS:
            raise invalid(f"JSON schema format {json.dumps(value)} at '{at}' is not supported: the formats "
                          f"enforced are {', '.join(FORMATS)}", param=at, code="unsupported_schema")
    elif key == "$ref":
        if not isinstance(value, str) or not (value == "#" or value.startswith("#/")):
            raise invalid(f"JSON schema reference {json.dumps(value)} at '{at}' is not supported: only local "
                          f"references ('#/$defs/…') are resolved", param=at, code="unsupported_schema")
        refs.append((at, value))
    elif key == "required":
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise invalid(f"Invalid schema at '{at}': expected an array of property names", param=at,
                          code="invalid_schema")
    elif key == "enum":
        if not isinstance(value, list) or not value:
            raise invalid(f"Invalid schema at '{at}': expected a non-empty array", param=at, code="invalid_schema")
    elif key == "pattern":
        if not isinstance(value, str):
            raise invalid(f"Invalid schema at '{at}': expected a string", param=at, code="invalid_schema")
    elif key != "const":  # the remaining keywords are bounds
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise invalid(f"Invalid schema at '{at}': expected a number", param=at, code="invalid_schema")
        if key == "multipleOf" and value <= 0:
            raise invalid(f"Invalid schema at '{at}': expected a number greater than 0", param=at,
                          code="invalid_schema")

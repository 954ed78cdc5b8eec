"""A request field's failure as the client's 400: OpenAI's validator's words and codes in the message, and in the
error's data what an API that answers pydantic's way (Anthropic's) needs to say it in its own words
(``extra.error_wording``, a table keyed by the data's ``check`` where one code stands for several checks).

The data: ``check`` (the keyword that failed: ``required``, ``tag``, ``type``, ``enum``, ``pattern``,
``minLength``, ``maxLength``, ``minItems``, ``maxItems``, ``extra``: a key not allowed), ``loc`` (the place as
pydantic writes it: ``paths.loc``, the spec's ``tagged`` shapes named after their objects), and the check's own
values: ``expected`` (``a valid list``; an enum's ``'a', 'b' or 'c'``), ``limit`` with ``plural`` (``s`` unless
the limit is 1) and ``length``, ``pattern``, and for a tagged object without its tag ``union`` (the object's
place) and ``tag`` (the key), as pydantic names a discriminated union it cannot read.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import jsonschema

from ..errors import ApiError, invalid
from . import paths

ARTICLE = {"string": "a string", "number": "a number", "integer": "an integer", "boolean": "a boolean",
           "array": "an array", "object": "an object"}
# pydantic's names for what a type error expected (``Input should be a valid list``), and for a union's member
# in its place (``messages.0.content.str``: the first member's, as its first error reads)
PYDANTIC_TYPE = {"string": "a valid string", "number": "a valid number", "integer": "a valid integer",
                 "boolean": "a valid boolean", "array": "a valid list", "object": "a valid dictionary"}
_MEMBER = {"string": "str", "number": "float", "integer": "int", "boolean": "bool", "array": "list", "object": "dict"}
_JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))  # bool before int: a bool is an int to Python


def json_type_name(value: Any) -> str:
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), type(value).__name__)


def type_data(loc: str, types: Any) -> dict:
    """A type error's data: what pydantic says was expected at ``loc`` (null, an Optional's, left out)."""
    kinds = [t for t in ([types] if isinstance(types, str) else types) if t != "null"]
    if len(kinds) > 1 and kinds[0] in _MEMBER:
        loc = f"{loc}.{_MEMBER[kinds[0]]}"
    return {"check": "type", "loc": loc, "expected": PYDANTIC_TYPE.get(kinds[0], kinds[0]) if kinds else "null"}


def bound_data(check: str, loc: str, limit: int, length: int) -> dict:
    return {"check": check, "loc": loc, "limit": limit, "plural": "" if limit == 1 else "s", "length": length}


def tag_key(parts: tuple, tagged: Mapping) -> str | None:
    """The key that tells the shapes of the object at ``parts`` apart, where the spec's ``tagged`` table names one
    and an object without it is no shape (no ``default``)."""
    tag = tagged.get(paths.pattern(parts))
    return tag if isinstance(tag, str) else None


def schema_error(name: str, error: jsonschema.ValidationError, body: Any = None,
                 tagged: Mapping | None = None) -> ApiError:
    """A field's JSON-Schema failure as the client's 400, naming the exact place (``messages[2].role``); its data
    as the module's docstring says."""
    tagged = dict(tagged or {})
    at = (name, *error.absolute_path)
    where = paths.spell(at)

    def loc(*more: Any) -> str:
        return paths.loc(body, (*at, *more), tagged)

    if error.validator == "required":
        missing = next(r for r in error.validator_value if r not in error.instance)
        data = ({"check": "tag", "union": loc(), "tag": missing, "loc": loc(missing)}
                if tag_key(at, tagged) == missing else {"check": "required", "loc": loc(missing)})
        return invalid(f"Missing required parameter: '{where}.{missing}'", param=f"{where}.{missing}",
                       code="missing_required_parameter", data=data)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties") or {})
        extra = next((k for k in error.instance if k not in allowed), None)
        if extra is not None:
            return invalid(f"Unknown parameter: '{where}.{extra}'.", param=f"{where}.{extra}",
                           code="unknown_parameter", data={"check": "extra", "loc": loc(extra)})
    if error.validator == "type":
        want = error.validator_value
        want_text = " or ".join(ARTICLE.get(t, t) for t in ([want] if isinstance(want, str) else want))
        got = json_type_name(error.instance)
        return invalid(f"Invalid type for '{where}': expected {want_text}, but got {ARTICLE.get(got, got)}",
                       param=where, code="invalid_type", data=type_data(loc(), want))
    # bounds in OpenAI's validator's own words and codes (metadata's 16 keys, 64-character keys, 512-character values)
    bound, value = error.validator_value, error.instance
    if error.validator == "maxProperties" and isinstance(value, dict):
        return invalid(f"Invalid '{where}': too many properties. Expected an object with at most {bound} properties, "
                       f"but got an object with {len(value)} properties instead.", param=where,
                       code="object_above_max_properties")
    if error.validator == "maxLength" and isinstance(value, str) and "propertyNames" in error.schema_path:
        shown = value if len(value) <= 100 else f"{value[:48]}…{value[-48:]}"
        return invalid(f"Invalid property name in '{where}': '{shown}' is too long. Expected a string with maximum "
                       f"length {bound}, but got a string with length {len(value)} instead.", param=f"{where}.{value}",
                       code="property_name_above_max_length")
    if error.validator == "maxLength" and isinstance(value, str):
        return invalid(f"Invalid '{where}': string too long. Expected a string with maximum length {bound}, but got a "
                       f"string with length {len(value)} instead.", param=where, code="string_above_max_length",
                       data=bound_data("maxLength", loc(), bound, len(value)))
    if error.validator == "pattern" and isinstance(value, str):  # a tool's name outside the API's rule, say
        return invalid(f"Invalid '{where}': string does not match pattern. Expected a string that matches the "
                       f"pattern '{bound}'.", param=where, code="invalid_value",
                       data={"check": "pattern", "loc": loc(), "pattern": bound})
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    data = None
    if error.validator in ("enum", "const"):  # the values taken, as pydantic lists them
        data = {"check": "enum", "loc": loc(), "expected": choices(bound if error.validator == "enum" else [bound])}
    elif error.validator in ("minLength", "minItems", "maxItems") and isinstance(value, (str, list)):
        data = bound_data(error.validator, loc(), bound, len(value))
    return invalid(f"Invalid value for '{where}': {message}", param=where, code="invalid_value", data=data)


def choices(values: list) -> str:
    """An enum's values as pydantic's errors list them: ``'a', 'b' or 'c'`` (null, absent here, left out)."""
    shown = [f"'{v}'" if isinstance(v, str) else json.dumps(v) for v in values if v is not None]
    return " or ".join(part for part in (", ".join(shown[:-1]), *shown[-1:]) if part)

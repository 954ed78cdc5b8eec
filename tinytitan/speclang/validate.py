"""Request validation compiled from a spec's ``request`` table.

Order (each step may raise ApiError naming the field):
1. the body must be a JSON object; unknown fields are refused (``unknown_fields: refuse``) or logged;
2. the strings ``lowercase`` names put in lower case; each declared field: null counts as absent; required,
   type, bounds, enum; defaults filled in;
3. refusals, in file order (wildcard paths name the concrete element in the message and ``param``);
4. ``to`` copies a value into the ChatRequest arguments; ``hook`` hands it to the protocol's Python;
5. ``derive`` fills ChatRequest arguments from the first present of several fields (precedence).
"""

from __future__ import annotations

import json
import logging
import re

from jsonschema.exceptions import best_match
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import ApiError, invalid
from . import json_text, paths
from .load import ProtocolSpec
from .schema_errors import ARTICLE, choices, json_type_name, schema_error, type_data
from .schemas import field_validator

log = logging.getLogger("tinytitan.spec")

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def is_type(value: Any, type_name: str) -> bool:
    if type_name == "any":
        return True
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    if type_name == "integer" and isinstance(value, float) and value.is_integer():
        return True
    return isinstance(value, _PY_TYPES[type_name])


def _same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def condition_holds(cond: Mapping[str, Any], value: Any) -> bool:
    for op, arg in cond.items():
        if op == "eq" and not _same(value, arg):
            return False
        if op == "in" and not any(_same(value, a) for a in arg):
            return False
        if op == "not_in" and any(_same(value, a) for a in arg):
            return False
        if op == "gt" and not (is_type(value, "number") and value > arg):
            return False
        if op == "lt" and not (is_type(value, "number") and value < arg):
            return False
        if op == "present" and value is None:
            return False
        if op == "nonempty" and not value:
            return False
        if op == "matches" and not (isinstance(value, str) and re.search(arg, value)):
            return False
        if op == "longer_than" and not (isinstance(value, list) and len(value) > arg):
            return False
        if op == "contains_other_than" and not (isinstance(value, list) and any(v not in arg for v in value)):
            return False
    return True


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


Hook = Callable[[Any, dict, dict, "Validated"], None]


@dataclass
class Validated:
    """A request that passed its protocol's table: the body (defaults filled) and the ChatRequest arguments."""

    body: dict
    args: dict = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # unknown fields accepted under unknown_fields: ignore
    headers: Mapping[str, str] = field(default_factory=dict)  # the call's, for hooks whose rules depend on one
    state: Any = None  # the protocol's own typed record of what its hooks found, for its handler


class RequestValidator:
    def __init__(self, spec: ProtocolSpec, hooks: Mapping[str, Hook], overrides: Mapping[str, dict] | None = None,
                 without: tuple[str, ...] = (), state: Callable[[], Any] = lambda: None):
        """``overrides``: a route's ``fields`` (per-field changes merged over ``request.fields``, or the
        route's own fields); ``without``: request fields the route does not take; ``state``: makes each
        request's ``Validated.state`` (the protocol's typed record that its hooks fill in)."""
        self.spec = spec
        overrides = overrides or {}
        declared = spec.request.get("fields") or {}
        self.fields: dict[str, dict] = {name: {**declared.get(name, {}), **overrides.get(name, {})}
                                        for name in [*declared, *(n for n in overrides if n not in declared)]
                                        if name not in without}
        self.refusals: list[dict] = spec.request.get("refuse") or []
        self.derive: dict[str, dict] = spec.request.get("derive") or {}
        self.unknown = spec.request.get("unknown_fields", "refuse")
        self.rules: list[dict] = spec.request.get("rules") or []
        named = {f["hook"] for f in self.fields.values() if "hook" in f} | {r["hook"] for r in self.rules}
        spec.check_provided("request hooks", named, hooks)
        self.hooks = hooks
        self.new_state = state
        self.schemas = {name: field_validator(f["schema"]) for name, f in self.fields.items() if "schema" in f}
        self.integral = {name: integer_places(f["schema"]) for name, f in self.fields.items() if "schema" in f}
        self.tagged: dict = spec.request.get("tagged") or {}

    def parse_json(self, raw: bytes) -> Any:
        try:
            # strictly UTF-8: json.loads(bytes) would let a surrogate written as raw bytes (ED A0 80) through
            text = raw.decode("utf-8-sig") if isinstance(raw, (bytes, bytearray)) else raw
            return json_text.request_body(text)
        except UnicodeDecodeError as exc:
            raise invalid(f"The request body is not valid JSON: it is not UTF-8 (byte {exc.start}: {exc.reason})",
                          code="invalid_json") from None
        except json.JSONDecodeError as exc:
            raise invalid(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
        except RecursionError:
            raise invalid("The request body is nested too deeply to parse", code="invalid_json") from None

    def validate(self, body: Any, headers: Mapping[str, str] | None = None) -> Validated:
        """``headers``: the call's, for the hooks whose rules depend on one."""
        if not isinstance(body, dict):
            raise invalid(f"The request body must be a JSON object, got {json_type_name(body)}", code="invalid_body")
        body = dict(body)
        for path in self.spec.request.get("lowercase") or ():  # read in lower case before any check
            paths.lower(body, path)
        out = Validated(body=body, headers=dict(headers or {}), state=self.new_state())
        for name in body:
            if name not in self.fields:
                if self.unknown == "refuse":
                    raise invalid(f"Unrecognized request argument supplied: {name}", param=name,
                                  code="unknown_parameter", data={"loc": name})
                out.ignored.append(name)
        if out.ignored:
            log.warning("%s: ignoring unknown request fields %s", self.spec.name, ", ".join(out.ignored))
        for name, f in self.fields.items():
            self._check_field(name, f, body)
        for rule in self.refusals:
            for parts, value in paths.reach(body, rule["field"]):
                if value is not None and condition_holds(rule["when"], value):
                    where = paths.spell(parts)
                    place = paths.loc(body, parts, self.tagged)  # (at a shape's key: the shape's place, then .type)
                    msg = rule["message"].format(value=_show(value), path=where, field=rule["field"], loc=place,
                                                 union=place.rpartition(".")[0],
                                                 length=len(value) if hasattr(value, "__len__") else "")
                    raise ApiError(rule.get("kind", "invalid_request"), msg, param=where, code=rule.get("code"),
                                   data={"details": rule["details"]} if "details" in rule else None)
        for name, f in self.fields.items():
            value = body.get(name)
            if value is None:
                continue
            if "to" in f:
                out.args[f["to"]] = value
            if "hook" in f:
                self._run_hook(name, f["hook"], value, body, out)
        for target, rule in self.derive.items():
            value = derive_value(rule, body)
            if value is not None:
                out.args[target] = value
        for rule in self.rules:  # cross-field rules: once each, after every field has been read
            present = [name for name in rule["reads"] if body.get(name) is not None]
            if present:
                self._run_hook(present[0], rule["hook"], None, body, out, rule=True)
        return out

    def _run_hook(self, name: str, hook: str, value: Any, body: dict, out: Validated, rule: bool = False) -> None:
        """A hook names the exact part it refuses (ApiError). Anything else it trips over is still the
        client's malformed value, not a server fault: a 400 naming the field, never a 500. A field's hook
        gets ``(value, body, args, validated)``; a rule's ``(body, args, validated)``."""
        try:
            if rule:
                self.hooks[hook](body, out.args, out)
            else:
                self.hooks[hook](value, body, out.args, out)
        except ApiError:
            raise
        except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:
            log.info("%s: hook %s rejected '%s': %r", self.spec.name, hook, name, exc)
            raise invalid(f"Invalid value for '{name}': some part of it does not have the expected shape "
                          f"({type(exc).__name__}: {exc})", param=name, code="invalid_value") from None

    def _check_field(self, name: str, f: dict, body: dict) -> None:
        value = body.get(name)
        if value is None:
            if f.get("required"):
                raise invalid(f"Missing required parameter: '{name}'", param=name, code="missing_required_parameter",
                              data={"check": "required", "loc": name})
            if "default" in f:
                body[name] = f["default"]
            return
        types = f.get("type", "any")
        types = [types] if isinstance(types, str) else types
        if not any(is_type(value, t) for t in types):
            want = " or ".join(ARTICLE.get(t, t) for t in types)
            got = json_type_name(value)
            raise invalid(f"Invalid type for '{name}': expected {want}, but got {ARTICLE.get(got, got)}", param=name,
                          code="invalid_type", data=type_data(name, types))
        if "integer" in types and isinstance(value, float) and value.is_integer():
            body[name] = value = int(value)
        if f.get("null_members") == "absent" and isinstance(value, dict):
            body[name] = value = {k: v for k, v in value.items() if v is not None}
        if "min" in f and is_type(value, "number") and value < f["min"]:
            raise invalid(f"Invalid value for '{name}': {value} is below the minimum {f['min']}", param=name,
                          code="invalid_value")
        if "max" in f and is_type(value, "number") and value > f["max"]:
            raise invalid(f"Invalid value for '{name}': {value} is above the maximum {f['max']}", param=name,
                          code="invalid_value")
        if "min_items" in f and isinstance(value, list) and len(value) < f["min_items"]:
            raise invalid(f"Invalid value for '{name}': expected at least {f['min_items']} item(s)", param=name,
                          code="invalid_value")
        if "enum" in f and not any(_same(value, e) for e in f["enum"]):
            raise invalid(f"Invalid value for '{name}': {_show(value)!r} is not one of {f['enum']}", param=name,
                          code="invalid_value", data={"check": "enum", "loc": name, "expected": choices(f["enum"])})
        if name in self.schemas:
            error = best_match(self.schemas[name].iter_errors(value))
            if error is not None:
                raise schema_error(name, error, {name: value}, self.tagged)
            if isinstance(self.integral.get(name), dict):
                whole_numbers(self.integral[name], value)


def says_integer(schema: Any) -> bool:
    """Whether ``schema`` takes integers by type (itself, or one of its anyOf/oneOf/allOf branches)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        return True
    return any(says_integer(s) for key in ("anyOf", "oneOf", "allOf") for s in schema.get(key) or ())


def integer_places(schema: Any) -> Any:
    """Where ``schema`` declares integers: True at a place that takes them, else the ``properties`` and ``items``
    that lead to one (``{"properties": {...}, "items": ...}``), or None where none does."""
    if not isinstance(schema, dict):
        return None
    if says_integer(schema):
        return True
    props = {k: p for k, sub in (schema.get("properties") or {}).items() if (p := integer_places(sub)) is not None}
    items = integer_places(schema.get("items"))
    return {"properties": props, "items": items} if props or items is not None else None


def whole_numbers(places: dict, value: Any) -> None:
    """Inside a valid value, each integral float (``4.0``) at a place its schema says integer (``places``, from
    ``integer_places``) becomes that int, as a top-level integer field's does: JSON Schema counts 4.0 an integer,
    and what it lands in (a token count, a seed) must be one. In place, walking only the places that lead there."""
    if isinstance(value, dict):
        slots = ((key, place) for key, place in places["properties"].items() if key in value)
    elif isinstance(value, list) and places["items"] is not None:
        slots = ((i, places["items"]) for i in range(len(value)))
    else:
        return
    for key, place in slots:
        item = value[key]
        if place is not True:
            whole_numbers(place, item)
        elif type(item) is float and item.is_integer():
            value[key] = int(item)


def derive_value(rule: Mapping[str, Any], body: Any) -> Any:
    if "value" in rule:
        return rule["value"]
    for path in rule.get("first_of", []):
        value = paths.get(body, path, None)
        if value is not None:
            return value
    return rule.get("default")


_TRUE, _FALSE = ("true", "1"), ("false", "0")


def query_args(table: Mapping[str, Mapping[str, Any]] | None, raw: Mapping[str, str]) -> dict[str, Any]:
    """A route's query parameters (its ``query`` table) from the strings sent: typed, bounded, defaults filled
    in; a bad one is the client's 400 naming it. Parameters the table does not declare are not read. ``raw``:
    a multi-dict (``getlist``) where an ``array`` parameter may be sent more than once."""
    out: dict[str, Any] = {}
    for name, rule in (table or {}).items():
        if rule["type"] == "array":  # every value sent, in either spelling (the SDKs send ``include[]=``)
            many = getattr(raw, "getlist", lambda key: [raw[key]] if key in raw else [])
            values = [*many(name), *many(f"{name}[]")]
            for value in values:
                if "enum" in rule and value not in rule["enum"]:
                    raise invalid(f"Invalid value for '{name}': {json.dumps(value)} is not one of {rule['enum']}",
                                  param=name, code="invalid_value")
            out[name] = values if values else list(rule.get("default") or [])
            continue
        text = raw.get(name)
        if text is None:
            out[name] = rule.get("default")
            continue
        kind = rule["type"]
        if kind == "integer":
            try:
                value: Any = int(text)
            except ValueError:
                raise invalid(f"Invalid type for '{name}': expected an integer, got {json.dumps(text)}", param=name,
                              code="invalid_type") from None
            low, high = rule.get("min"), rule.get("max")
            if (low is not None and value < low) or (high is not None and value > high):
                bound = (f"between {low} and {high}" if low is not None and high is not None
                         else f"at least {low}" if low is not None else f"at most {high}")
                raise invalid(f"Invalid value for '{name}': {value} (must be {bound})", param=name,
                              code="invalid_value")
        elif kind == "boolean":
            if text.lower() not in _TRUE + _FALSE:
                raise invalid(f"Invalid type for '{name}': expected a boolean (true or false), got {json.dumps(text)}",
                              param=name, code="invalid_type")
            value = text.lower() in _TRUE
        else:
            value = text
        if "enum" in rule and value not in rule["enum"]:
            raise invalid(f"Invalid value for '{name}': {json.dumps(value)} is not one of {rule['enum']}", param=name,
                          code="invalid_value")
        out[name] = value
    return out

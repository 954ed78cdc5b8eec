"""A field schema in spec/ is checked against the 2020-12 meta-schema rewritten without references
(speclang/meta_check.py): the verdict, the first error's words and its place are jsonschema's ``check_schema``'s,
at a fraction of the cost (resolving ``$dynamicRef`` at every subschema was most of building the protocols)."""

from __future__ import annotations

import copy
import random

import jsonschema
import pytest

from tinytitan.speclang import load, meta_check
from tinytitan.speclang.load import read_spec, spec_dir

# a wrong value for a keyword, for every vocabulary (and the older keywords the meta-schema still checks)
BAD = [("type", "strin"), ("type", ["string", "strin"]), ("type", []), ("minLength", -1), ("minLength", 1.5),
       ("pattern", "("), ("pattern", 3), ("required", "x"), ("required", [1]), ("required", ["a", "a"]),
       ("properties", []), ("properties", {"a": 3}), ("items", 3), ("items", [{}]), ("enum", "x"), ("$ref", 5),
       ("$defs", []), ("$defs", {"x": "y"}), ("additionalProperties", "no"), ("format", 3), ("deprecated", "yes"),
       ("dependentRequired", {"a": [1]}), ("$id", "a#frag"), ("$anchor", "1bad"), ("allOf", []), ("anyOf", {}),
       ("oneOf", [3]), ("not", []), ("if", 1), ("maxItems", -2), ("uniqueItems", 1), ("const", None),
       ("patternProperties", {"(": {}}), ("propertyNames", 4), ("definitions", {"a": 1}), ("dependencies", {"a": 2}),
       ("dependencies", {"a": ["b", 1]}), ("$schema", 3), ("$vocabulary", {"x": 1}), ("minimum", "1"),
       ("multipleOf", 0), ("prefixItems", []), ("contentSchema", 1), ("examples", 1), ("unevaluatedItems", 2),
       ("$dynamicRef", 1), ("$comment", 1), ("title", 1), ("$recursiveRef", 1), ("contains", "x"),
       ("minContains", -1), ("dependentSchemas", {"a": 1}), ("$dynamicAnchor", "#x"), ("readOnly", 0)]


def field_schemas() -> list:
    out = []
    for path in sorted(spec_dir().glob("*.yaml")):
        spec = read_spec(path)
        fields = dict((spec.get("request") or {}).get("fields") or {})
        for route in spec.get("routes") or []:
            fields.update({f"{route['handler']}.{k}": v for k, v in (route.get("fields") or {}).items()})
        out += [f["schema"] for f in fields.values() if "schema" in f]
    return out


def places(schema, path=()):
    """The paths of ``schema``'s subschemas (itself first)."""
    if not isinstance(schema, dict):
        return
    yield path
    for key, value in schema.items():
        if key in meta_check.MAP and isinstance(value, dict):
            for name, sub in value.items():
                yield from places(sub, path + (key, name))
        elif key in meta_check.ONE:
            yield from places(value, path + (key,))
        elif key in meta_check.LIST and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from places(sub, path + (key, i))


def verdict(check, schema):
    try:
        check(schema)
    except jsonschema.SchemaError as exc:
        return list(exc.path), exc.message, exc.validator
    return None


def test_the_rewritten_meta_schema_is_in_use_and_resolves_nothing():
    top = meta_check.rewritten()
    assert top["properties"]["items"] is top and top["properties"]["$defs"]["additionalProperties"] is top
    seen, todo = set(), [top]
    while todo:  # every subschema, once
        node = todo.pop()
        if isinstance(node, bool) or id(node) in seen:
            continue
        seen.add(id(node))
        assert not {"$ref", "$dynamicRef", "$id", "$schema"} & set(node), node
        for key, value in node.items():
            todo += [value] if key in meta_check.ONE else value if key in meta_check.LIST else \
                list(value.values()) if key in meta_check.MAP else []
    assert len(seen) > 40
    # (``check`` falls back to check_schema only where the meta-schema is not this one)
    assert meta_check._validator() is not None


def test_every_shipped_field_schema_passes_both():
    schemas = field_schemas()
    assert len(schemas) > 20
    for schema in schemas:
        assert verdict(meta_check.check, schema) is None
        assert verdict(jsonschema.Draft202012Validator.check_schema, schema) is None


@pytest.mark.parametrize("schema", [3, "x", [], None, True, False, {"type": 3}, {"properties": {"a": {"type": "x"}}},
                                    {"items": {"items": {"minLength": -1}}}, {"$defs": {"a": {"pattern": "(["}}},
                                    {"dependencies": {"a": {"type": 1}}}, {"definitions": {"a": {"enum": 1}}}])
def test_a_broken_schema_fails_as_check_schema_says(schema):
    assert verdict(meta_check.check, schema) == verdict(jsonschema.Draft202012Validator.check_schema, schema)


def test_broken_field_schemas_fail_as_check_schema_says():
    """Each shipped field schema broken in one to three places at random (a fixed seed): the same first error,
    in the same words, at the same place."""
    rng = random.Random(20261207)
    schemas = field_schemas()
    cases = 0
    for schema in schemas:
        spots = list(places(schema))
        for _ in range(8):
            broken = copy.deepcopy(schema)
            for _ in range(rng.choice((1, 1, 2, 3))):
                node = broken
                try:
                    for step in rng.choice(spots):
                        node = node[step]
                except (KeyError, IndexError, TypeError):  # (an earlier break changed the way there)
                    continue
                if isinstance(node, dict):
                    key, value = rng.choice(BAD)
                    node[key] = copy.deepcopy(value)
            expected = verdict(jsonschema.Draft202012Validator.check_schema, broken)
            assert verdict(meta_check.check, broken) == expected, broken
            cases += expected is not None
    assert cases > 100


def test_a_broken_field_schema_fails_the_spec_at_load_naming_the_place():
    raw = read_spec(spec_dir() / "openai_chat.yaml")
    raw["request"]["fields"]["messages"]["schema"]["items"]["properties"]["name"]["maxLength"] = -1
    with pytest.raises(load.SpecError) as e:
        load.compile_spec(raw, "openai_chat.yaml")
    assert str(e.value) == ("openai_chat.yaml: request.fields.messages.schema.items.properties.name.maxLength: "
                            "-1 is less than the minimum of 0")
    raw = read_spec(spec_dir() / "openai_chat.yaml")
    raw["request"]["fields"]["stop"]["schema"] = {"anyOf": [{"type": "string", "pattern": "(["}]}
    with pytest.raises(load.SpecError, match=r"^openai_chat.yaml: request.fields.stop.schema.anyOf\[0\].pattern: "
                                             r"'\(\[' is not a 'regex'$"):
        load.compile_spec(raw, "openai_chat.yaml")

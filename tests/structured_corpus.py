"""A corpus of JSON schemas, simple to recursive, covering every keyword structured output supports.

Decoded with the random-weight demo model, whose output is gibberish: only the grammar can make a
document that validates. Strings a sampled gibberish model could run on forever carry a ``maxLength``.
"""

from __future__ import annotations

S = {"type": "string", "maxLength": 12}

CORPUS: dict[str, dict] = {
    "string": {"type": "string", "maxLength": 20},
    "number": {"type": "number"},
    "integer": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "object_empty": {"type": "object", "additionalProperties": False},
    "array_of_int": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
    "type_list": {"type": ["string", "null", "integer"], "maxLength": 5},
    "flat_object": {"type": "object", "properties": {"name": S, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
                    "required": ["name", "age", "ok"], "additionalProperties": False},
    "optional_props": {"type": "object", "properties": {"a": S, "b": {"type": "number"}}, "required": ["a"],
                       "additionalProperties": False},
    "additional_schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                          "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}, "maxProperties": 3},
    "nested_object": {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "id": {"type": "integer"}, "tags": {"type": "array", "items": S, "maxItems": 3}},
        "required": ["id", "tags"], "additionalProperties": False}}, "required": ["user"],
        "additionalProperties": False},
    "min_max_items": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
    "prefix_items": {"type": "array", "prefixItems": [{"type": "integer"}, S, {"type": "boolean"}],
                     "items": False, "minItems": 3},
    "enum_strings": {"type": "string", "enum": ["red", "green", "blue"]},
    "enum_mixed": {"enum": ["a", 1, None, True, {"x": [1]}]},
    "const": {"const": {"version": 2, "kind": "fixed"}},
    "const_in_object": {"type": "object", "properties": {"kind": {"const": "point"}, "x": {"type": "number"}},
                        "required": ["kind", "x"], "additionalProperties": False},
    "any_of": {"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"s": S}, "required": ["s"],
                                                "additionalProperties": False}]},
    "one_of_disjoint": {"oneOf": [{"type": "string", "maxLength": 8}, {"type": "array", "items": {"type": "null"},
                                                                        "maxItems": 2}]},
    "all_of_objects": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
    "ref_defs": {"type": "object", "properties": {"p": {"$ref": "#/$defs/point"}, "q": {"$ref": "#/$defs/point"}},
                 "required": ["p", "q"], "additionalProperties": False,
                 "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                     "required": ["x", "y"], "additionalProperties": False}}},
    "recursive_tree": {"$ref": "#/$defs/node", "$defs": {"node": {
        "type": "object", "properties": {"v": {"type": "integer"},
                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}}},
    "recursive_list": {"type": "object", "properties": {"head": {"type": "integer"},
                                                        "tail": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
                       "required": ["head", "tail"], "additionalProperties": False},
    "min_max_length": {"type": "string", "minLength": 3, "maxLength": 6},
    "pattern": {"type": "string", "pattern": "^[a-z]{2,5}-[0-9]{3}$"},
    "pattern_unanchored": {"type": "string", "pattern": "ab+c", "maxLength": 10},
    "format_date": {"type": "string", "format": "date"},
    "format_date_time": {"type": "string", "format": "date-time"},
    "format_time": {"type": "string", "format": "time"},
    "format_uuid": {"type": "string", "format": "uuid"},
    "format_email": {"type": "string", "format": "email", "maxLength": 30},
    "format_ipv4": {"type": "string", "format": "ipv4"},
    "format_ipv6": {"type": "string", "format": "ipv6"},
    "format_duration": {"type": "string", "format": "duration"},  # (pydantic's timedelta)
    "format_hostname": {"type": "string", "format": "hostname", "maxLength": 40},
    "format_with_pattern": {"type": "string", "format": "date", "pattern": "^20"},
    "numeric_bounds": {"type": "object", "properties": {
        "i": {"type": "integer", "minimum": -5, "maximum": 5},
        "x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "m": {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 100}},
        "required": ["i", "x", "m"], "additionalProperties": False},
    "annotations": {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Thing",
                    "description": "a thing", "$comment": "annotations only", "type": "object",
                    "properties": {"n": {"type": "integer", "default": 1, "examples": [1, 2]}},
                    "required": ["n"], "additionalProperties": False},
    "pydantic_style": {"$defs": {"Step": {"properties": {"explanation": {"title": "Explanation", **S},
                                                          "output": {"title": "Output", **S}},
                                           "required": ["explanation", "output"], "title": "Step", "type": "object",
                                           "additionalProperties": False}},
                       "properties": {"steps": {"items": {"$ref": "#/$defs/Step"}, "title": "Steps", "type": "array",
                                                "maxItems": 2},
                                      "final_answer": {"title": "Final Answer", **S}},
                       "required": ["steps", "final_answer"], "title": "MathReasoning", "type": "object",
                       "additionalProperties": False},
    "nullable_union": {"type": "object", "properties": {"v": {"anyOf": [S, {"type": "null"}]}}, "required": ["v"],
                       "additionalProperties": False},
}

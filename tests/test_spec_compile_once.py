"""A spec table is read on libyaml and compiled once per content: what a server's start spends on its specs.

Reading the spec files with PyYAML's pure-Python parser and checking each table against the meta-schema were most
of building a server's protocols (the Responses protocol compiles two side tables each time it is built)."""

from __future__ import annotations

import pytest
import yaml

from tinytitan.speclang import load
from tinytitan.speclang.load import SpecError, compile_spec, read_yaml, spec_dir


def test_libyaml_reads_every_shipped_spec_as_the_python_parser_does():
    for path in sorted(spec_dir().glob("*.yaml")):
        text = path.read_text()
        assert read_yaml(text) == yaml.safe_load(text), path.name


def test_the_same_table_from_the_same_source_compiles_once():
    raw = load.read_spec(spec_dir() / "openai_chat.yaml")
    first = compile_spec(raw, "chat")
    again = compile_spec(load.read_spec(spec_dir() / "openai_chat.yaml"), "chat")  # equal, not the same object
    assert again is first
    assert compile_spec(raw, "elsewhere") is not first  # its errors name their source


def test_a_table_that_fails_its_checks_fails_every_time():
    bad = {"protocol": "x", "errors": {"envelope": {}, "kinds": {}}}
    for _ in range(2):
        with pytest.raises(SpecError, match="server_error"):
            compile_spec(bad, "bad")


def test_the_memo_is_bounded():
    base = load.read_spec(spec_dir() / "shared.yaml")
    for i in range(load._COMPILED_MAX + 5):
        compile_spec({**base, "protocol": f"shared{i}"}, "bounded")
    assert len(load._COMPILED) <= load._COMPILED_MAX


def test_a_table_changed_after_it_compiled_changes_no_other_servers_spec():
    """A spec shared by content is the caller's no more: a raw changed in place after it compiled (a test building
    a variant of a shipped table) leaves what the next server loads as the file says."""
    raw = load.read_spec(spec_dir() / "openai_chat.yaml")
    compile_spec(raw, "openai_chat.yaml")
    raw["extra"]["keepalive_seconds"] = 12345
    raw["request"]["fields"].pop("model")
    fresh = load.load_protocol("openai_chat")
    assert fresh.extra.get("keepalive_seconds") != 12345 and "model" in fresh.request["fields"]


def shared_with(**extra) -> dict:
    raw = load.read_spec(spec_dir() / "shared.yaml")
    return {**raw, "extra": {**raw["extra"], **extra}}


@pytest.mark.parametrize("one, other", [
    ({"x": {"1": "a"}}, {"x": {1: "a"}}),  # a key's type: a map looked up by an integer finds only the integer
    ({"x": 1}, {"x": True}), ({"x": 1}, {"x": 1.0}), ({"x": {1: "a"}}, {"x": {True: "a"}}),
    ({"x": [1, 2]}, {"x": (1, 2)}),
])
def test_tables_that_differ_only_in_types_are_two_specs(one, other):
    """The memo's key is the table exactly: a table equal to another once written as JSON (1 and "1" as keys,
    a tuple and a list) is compiled for itself, not handed the other's spec."""
    for first, second in ((one, other), (other, one)):
        load._COMPILED.clear()
        compile_spec(shared_with(**first), "types.yaml")
        spec = compile_spec(shared_with(**second), "types.yaml")
        assert [(type(k), k) for k in spec.extra] == [(type(k), k) for k in shared_with(**second)["extra"]]
        x = spec.extra["x"]
        assert type(x) is type(second["x"]) and repr(x) == repr(second["x"]), (first, second)


def test_tables_in_another_order_are_two_specs():
    """Order is meaning: GET / gives a tie in Accept to the first answer ``extra.root`` lists."""
    raw = load.read_spec(spec_dir() / "shared.yaml")
    turned = {**raw, "extra": {**raw["extra"], "root": dict(reversed(raw["extra"]["root"].items()))}}
    compile_spec(raw, "order.yaml")
    assert list(compile_spec(turned, "order.yaml").extra["root"]) == list(turned["extra"]["root"])


def test_a_tuple_where_the_schema_wants_a_list_is_refused_after_the_list_compiled():
    raw = load.read_spec(spec_dir() / "shared.yaml")
    compile_spec(raw, "tuple.yaml")
    with pytest.raises(SpecError, match="routes"):
        compile_spec({**raw, "routes": tuple(raw["routes"])}, "tuple.yaml")

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

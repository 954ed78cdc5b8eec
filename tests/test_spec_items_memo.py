"""A field's schema remembers the array items it found valid (speclang/schemas.py): an agent's conversation is
validated item by item only where it is new, and a bad item is refused in exactly the words a fresh validator
uses."""

from __future__ import annotations

import copy
import json
import random

import pytest

from tinytitan.errors import ApiError
from tinytitan.protocols.anthropic_messages import AnthropicMessages
from tinytitan.speclang import schemas


def agent_body(turns: int = 12) -> dict:
    """Shaped like Claude Code's: system blocks, tools with input schemas, tool_use / tool_result turns."""
    tools = [{"name": name, "description": f"{name} a file", "input_schema": {
        "type": "object", "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["file_path"]}} for name in ("Read", "Edit", "Grep", "Bash")]
    messages = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": [{"type": "text", "text": f"look at file {i}"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Reading it."},
                                              {"type": "tool_use", "id": f"toolu_{i:04d}", "name": "Read",
                                               "input": {"file_path": f"/src/f{i}.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i:04d}",
                                          "content": [{"type": "text", "text": "x = 1\n" * 5}]}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Done with {i}."}]},
        ]
    messages.append({"role": "user", "content": "next"})
    return {"model": "m", "max_tokens": 64, "stream": True, "tools": tools, "messages": messages,
            "system": [{"type": "text", "text": "You are an agent."},
                       {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]}


def outcome(proto, body: dict):
    try:
        proto.validate(json.dumps(body).encode())
        return "valid"
    except ApiError as exc:
        return exc.kind, exc.message, exc.param, exc.code


def test_items_seen_valid_are_not_validated_again(monkeypatch):
    added, known = [], []
    real_add, real_known = schemas._Seen.add, schemas._Seen.known
    monkeypatch.setattr(schemas._Seen, "add", lambda self, d: added.append(d) or real_add(self, d))
    monkeypatch.setattr(schemas._Seen, "known", lambda self, d: known.append(real_known(self, d)) or known[-1])
    proto, body = AnthropicMessages(), agent_body()
    assert outcome(proto, body) == "valid"
    first = len(added)
    assert first == len(body["messages"]) + len(body["tools"]) + len(body["system"]) and not any(known)
    body["messages"] += [{"role": "assistant", "content": "a new answer"}, {"role": "user", "content": "more"}]
    known.clear()
    assert outcome(proto, body) == "valid"
    assert len(added) == first + 2 and known.count(True) == first  # only the new turn was validated


def test_a_bad_item_among_remembered_ones_is_refused_as_a_fresh_validator_refuses_it():
    warm = AnthropicMessages()
    body = agent_body()
    assert outcome(warm, body) == "valid"
    bad = copy.deepcopy(body)
    bad["messages"][17]["content"][1]["type"] = "tool_used"
    got = outcome(warm, bad)
    assert got != "valid" and got == outcome(AnthropicMessages(), bad)
    assert "messages[17]" in got[2]


@pytest.mark.parametrize("seed", range(4))
def test_random_edits_are_judged_the_same_by_a_warm_and_a_fresh_validator(seed):
    """Random edits of an agent's body (a value replaced or a key dropped, at any depth of any message, tool or
    system block), through one validator that has seen every earlier body and through a fresh one each time:
    the same verdict, the same error, the same param."""
    rng = random.Random(seed)
    warm = AnthropicMessages()
    base = agent_body()
    assert outcome(warm, base) == "valid"
    junk = [None, 7, -1.5, "x", "", [], {}, [{}], {"type": "text"}, True]
    verdicts = set()
    for _ in range(60):
        body = copy.deepcopy(base)
        field = rng.choice(["messages", "messages", "messages", "tools", "system"])
        node = body[field][rng.randrange(len(body[field]))]
        while isinstance(node, (dict, list)) and node and rng.random() < 0.7:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            key = rng.choice(keys)
            if not isinstance(node[key], (dict, list)) or rng.random() < 0.3:
                if isinstance(node, dict) and rng.random() < 0.3:
                    del node[key]
                else:
                    node[key] = rng.choice(junk)
                break
            node = node[key]
        verdict = outcome(warm, body)
        assert verdict == outcome(AnthropicMessages(), body), body
        verdicts.add(verdict == "valid")
    assert verdicts == {True, False}  # both kinds were seen

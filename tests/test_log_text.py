"""The log holds no prompt or answer text (docs/operating.md): a warning about the model's output says how
long the text was; only at --log-level debug, which an operator turns on to read what a parser could not, does
it quote the text."""

from __future__ import annotations

import logging

import httpx

from tinytitan.engine.families.scanner import OutputParser

MODEL = "tinytitan-scripted"
SECRET = "AKIA-SECRET-FROM-THE-MODEL"


def said(caplog) -> list[str]:
    return [f"{rec.name}: {rec.getMessage()}" for rec in caplog.records if SECRET in rec.getMessage()]


async def test_a_tool_calls_arguments_are_never_logged(serve, caplog):
    caplog.set_level(logging.INFO)
    s = await serve([f'<tool_call>\n{{"name": "read_file", "arguments": ["{SECRET}"]}}\n</tool_call>'])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/messages"), headers={"anthropic-version": "2023-06-01"}, json={
            "model": MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": "read it"}],
            "tools": [{"name": "read_file", "input_schema": {"type": "object"}}]})
    assert r.status_code == 200, r.text
    assert said(caplog) == []
    assert any("arguments are not a complete JSON object" in rec.getMessage() for rec in caplog.records)


def test_a_parsers_warning_quotes_the_model_only_at_debug(caplog):
    def parse():
        p = OutputParser()
        p.feed(f"<tool_call>{SECRET} is not a call</tool_call>")
        p.finish()

    caplog.set_level(logging.INFO)
    parse()
    warned = [rec.getMessage() for rec in caplog.records if rec.name == "tinytitan.parser"]
    assert warned and said(caplog) == [] and "characters" in warned[0]
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="tinytitan.parser")
    parse()
    assert said(caplog)

"""Several calls inside one call block come out as several calls, in every family whose own parser reads them.

Qwen3-Coder may write two ``<function=…>`` in one ``<tool_call>`` block; its reference parser (Qwen's
``qwen3coder_tool_parser.py``, vLLM's ``qwen3_coder``) takes every ``<function=…></function>`` of a block. The
second came back as text (its markup, in the answer) and the call was lost. The other families whose section
holds several calls by design keep them too (a guard: DeepSeek, Kimi, MiniMax, DSML, Gemma, Llama 3's ``;``).
"""

from __future__ import annotations

import json
import logging

import httpx
import pytest

import family_fixtures as ff
from protocol_folds import TOOL_PROTOCOLS, told_everywhere
from tinytitan import events as ev
from tinytitan.engine.families import FAMILIES

CITY = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}}
CITIES = ("Rome", "Oslo")


def _each(fmt: str) -> str:
    return "".join(fmt.format(c=c, i=i) for i, c in enumerate(CITIES))


BLOCKS = {
    "qwen3_coder": "<tool_call>\n" + _each("<function=get_weather>\n<parameter=city>\n{c}\n</parameter>\n</function>\n")
                   + "</tool_call>",
    "qwen": "<tool_call>\n" + _each('{{"name": "get_weather", "arguments": {{"city": "{c}"}}}}\n') + "</tool_call>",
    "deepseek_v3": "<｜tool▁calls▁begin｜>" + _each('<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{{"city": "{c}"}}'
                                                  "<｜tool▁call▁end｜>") + "<｜tool▁calls▁end｜>",
    "deepseek_r1": "<｜tool▁calls▁begin｜>" + "\n".join(
        '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "%s"}\n```<｜tool▁call▁end｜>' % c
        for c in CITIES) + "<｜tool▁calls▁end｜>",
    "deepseek_v32": "<｜DSML｜function_calls>\n" + _each('<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter '
                                                       'name="city" string="true">{c}</｜DSML｜parameter>\n'
                                                       "</｜DSML｜invoke>\n") + "</｜DSML｜function_calls>",
    "kimi_k2": "<|tool_calls_section_begin|>" + _each("<|tool_call_begin|>functions.get_weather:{i}"
                                                      '<|tool_call_argument_begin|>{{"city": "{c}"}}<|tool_call_end|>')
               + "<|tool_calls_section_end|>",
    "minimax_m2": "<minimax:tool_call>\n" + _each('<invoke name="get_weather">\n<parameter name="city">{c}</parameter>\n'
                                                  "</invoke>\n") + "</minimax:tool_call>",
    "gemma": "```tool_code\n" + _each('get_weather(city="{c}")\n') + "```",
    "gemma4": "<|tool_call>" + _each('call:get_weather{{city:<|"|>{c}<|"|>}}') + "<tool_call|>",
    "function_gemma": "<start_function_call>" + _each("call:get_weather{{city:<escape>{c}<escape>}}")
                      + "<end_function_call>",
    "llama3": "<|python_tag|>" + '; '.join(json.dumps({"name": "get_weather", "parameters": {"city": c}})
                                           for c in CITIES),
}


@pytest.mark.parametrize("step", [1, 7, 10_000])
@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_every_call_of_a_block_comes_out(family, step, caplog):
    """Fed a character at a time, in pieces, or whole: both calls, nothing as text, and the block's grammar
    agrees with what was streamed (a disagreement is logged)."""
    raw = BLOCKS[family]
    with caplog.at_level(logging.WARNING, logger="tinytitan.parser"):
        events = ff.parsed(family, [raw[i:i + step] for i in range(0, len(raw), step)], CITY)
    assert ff.calls_of(events) == ["get_weather", "get_weather"], events
    assert [json.loads(a) for a in ff.arguments_of(events)] == [{"city": c} for c in CITIES]
    assert ff.text_of(events) == ""
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_qwen3_coder_text_between_two_functions_is_text():
    """Prose between the two functions of a block is the answer's text; both calls are kept."""
    fn = "<function=get_weather>\n<parameter=city>\n{}\n</parameter>\n</function>\n"
    raw = "<tool_call>\n" + fn.format("Rome") + "And the other.\n" + fn.format("Oslo") + "</tool_call>"
    for pieces in ([raw], list(raw)):
        events = ff.parsed("qwen3_coder", pieces, CITY)
        assert ff.calls_of(events) == ["get_weather", "get_weather"]
        assert ff.text_of(events) == "And the other."


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("one-block")


async def test_qwen3_coder_two_functions_in_one_block_on_every_protocol(serve, root):
    """Chat Completions, Responses, Messages and Ollama, streamed and not: the two calls, their arguments."""
    b = ff.backend("qwen3_coder", root, [BLOCKS["qwen3_coder"]] * (2 * len(TOOL_PROTOCOLS)))
    s = await serve(backend=b)
    want = [{"city": c} for c in CITIES]
    async with httpx.AsyncClient(timeout=60) as client:
        async for proto, stream, told in told_everywhere(client, s, b.model_id, BLOCKS["qwen3_coder"],
                                                         "get_weather", CITY["get_weather"]):
            assert [c[0] for c in told.calls] == ["get_weather", "get_weather"], (proto, stream, told)
            args = [c[1] if isinstance(c[1], dict) else json.loads(c[1]) for c in told.calls]
            assert args == want, (proto, stream, told)
            assert told.text == "", (proto, stream, told)


NEXT_HEADS = {"qwen3_coder": ("<tool_call>\n", "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                                               "</function>\n", "<function=get_we", "<function=two words>\n",
                              "</tool_call>"),
              "minimax_m2": ("<minimax:tool_call>\n", '<invoke name="get_weather">\n<parameter name="city">Rome'
                                                      "</parameter>\n</invoke>\n", '<invoke name="get_we',
                             '<invoke name="two words">\n', "</minimax:tool_call>")}


@pytest.mark.parametrize("family", sorted(NEXT_HEADS))
def test_the_next_calls_head_cut_or_not_understood_leaves_the_first_call_alone(family):
    """After a complete call, the next one's head cut by the cap (or by the end of the answer) or not a head
    at all: the first call is done once, its arguments as written (a second ToolCallDone of the first call,
    ``{}``, used to follow, and ``{}`` was streamed onto its arguments); what is no call is text, a head the cap
    cut is dropped."""
    opener, call, cut_head, bad_head, closer = NEXT_HEADS[family]
    for pieces, cut, text in ((list(opener + call + cut_head), True, ""),
                              (list(opener + call + cut_head), False, cut_head),
                              (list(opener + call + bad_head + closer), False, bad_head.strip())):
        p = FAMILIES[family].parser(False, {}, CITY)
        events = [e for piece in pieces for e in p.feed(piece)[0]] + p.finish(cut=cut)
        done = [e for e in events if isinstance(e, ev.ToolCallDone)]
        assert [(d.index, json.loads(d.arguments)) for d in done] == [(0, {"city": "Rome"})], events
        streamed = "".join(e.text for e in events if isinstance(e, ev.ToolCallArgsDelta))
        assert streamed == done[0].arguments
        assert ff.text_of(events) == text

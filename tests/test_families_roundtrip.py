"""Per family: detection from the fixture, role mapping before rendering, and the round trip — an assistant
turn with tool calls rendered by the family's own template, then parsed back into the same calls."""

from __future__ import annotations

import json

import pytest

import family_fixtures as ff
from tinytitan import events as ev
from tinytitan.chat_request import ChatRequest, Message, ToolCall
from tinytitan.engine.families import FAMILIES, detect
from tinytitan.engine.prompt.messages import template_messages, template_tools
from family_cases import CALLS, CONVERSATION, OPENED_BY_USER_TURN, TEMPLATE_KWARGS, TOOLS, TURN_END, render_prompt


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("families-rt")


@pytest.mark.parametrize("family", list(ff.SPECS))
def test_detected_from_the_tokenizer(root, family):
    tok, cfg = ff.load(family, root)
    assert detect(tok, cfg).name == family
    assert detect(tok, None).name == family  # the template alone is enough
    b = ff.backend(family, root)
    assert b.family.name == family


def test_detect_fallbacks():
    assert detect(None, {"model_type": "gpt_oss"}).name == "gpt_oss"
    assert detect(None, None).markup.tool_open is None  # nothing known: plain text

    class Bare:
        chat_template = None

        def get_vocab(self):
            return {"<think>": 1, "</think>": 2, "hello": 3}

    fam = detect(Bare(), None)
    assert fam.name == "generic" and fam.markup.think_open == "<think>" and fam.markup.tool_open is None


@pytest.mark.parametrize("family", list(ff.SPECS))
def test_whole_conversation_renders(root, family):
    """Every family's template takes the whole conversation: a mid-conversation system turn, parallel calls,
    tool results — whatever roles it lacks were mapped."""
    b = ff.backend(family, root)
    prepared = b.prepare(ChatRequest("m", CONVERSATION, TOOLS))
    text = prepared.prompt_text
    assert "Thanks. And tomorrow?" in text and "sunny, 21C" in text and "Answer in one line." in text
    assert "Paris" in text and "notes/a.md" in text


def test_gemma_roles_mapped(root):
    text = ff.backend("gemma", root).prepare(ChatRequest("m", CONVERSATION, TOOLS)).prompt_text
    assert "<start_of_turn>system" not in text and "<start_of_turn>tool" not in text
    assert "```tool_output\nsunny, 21C\n```" in text
    assert '```tool_code\nget_weather(city="Paris", days=3)\n```' in text
    assert "get_weather" in text.split("<start_of_turn>model")[0]  # the tool list reached the first turn
    assert text.count("<start_of_turn>user") == 2  # results and the next question share one user turn


def test_mistral_ids_and_alternation(root):
    text = ff.backend("mistral", root).prepare(ChatRequest("m", CONVERSATION, TOOLS)).prompt_text
    assert "call_0001" not in text
    assert text.endswith("Thanks. And tomorrow?[/TOOL_RESULTS]")


def test_llama_one_call_per_turn(root):
    text = ff.backend("llama3", root).prepare(ChatRequest("m", CONVERSATION, TOOLS)).prompt_text
    assert text.count('{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}') == 1
    assert text.count('{"name": "write_file", "parameters"') == 1


def test_role_mapping_leaves_input_alone(root):
    b = ff.backend("gemma", root)
    msgs = template_messages(ChatRequest("m", CONVERSATION, TOOLS))
    before = json.dumps(msgs)
    b.family.map_roles(msgs, template_tools(ChatRequest("m", CONVERSATION, TOOLS)), b.tokenizer.chat_template)
    assert json.dumps(msgs) == before


@pytest.mark.parametrize("family", list(ff.SPECS))
def test_rendered_calls_parse_back(root, family):
    """The template's rendering of an assistant turn, fed to the family's parser token by token, gives back
    the same calls (names, argument values), and the text and reasoning the template kept."""
    b = ff.backend(family, root)
    calls = CALLS[:1] if family == "llama3" else CALLS  # Llama's template: one call per turn
    turn = Message("assistant", "Let me check.", tool_calls=calls, reasoning="I need two tools.")
    history = CONVERSATION[:2]
    prefix = render_prompt(b, history, family not in OPENED_BY_USER_TURN)
    full = render_prompt(b, history + (turn,), False)
    assert full.startswith(prefix)
    rest = full[len(prefix):]
    end = TURN_END[family]
    if end:
        rest = rest[: rest.index(end)]

    b.entries = [type(b.entries[0])(rest)]
    events = ff.generate(b, ChatRequest("m", history, TOOLS, reasoning=False if family in TEMPLATE_KWARGS else None))
    done = [e for e in events if isinstance(e, ev.ToolCallDone)]
    started = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    assert [s.name for s in started] == [c.name for c in calls]
    assert [json.loads(d.arguments) for d in done] == [json.loads(c.arguments) for c in calls]
    for d in done:
        assert "".join(e.text for e in events if isinstance(e, ev.ToolCallArgsDelta) and e.index == d.index) \
            == d.arguments
    text = "".join(e.text for e in events if isinstance(e, ev.TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ev.ReasoningDelta))
    if family == "gpt_oss":  # one analysis message per tool-calling turn: the preamble joins the reasoning
        assert (text, reasoning) == ("", "I need two tools.\n\nLet me check.")
    else:
        assert text == ("Let me check." if "Let me check." in rest else "")
        assert reasoning.strip() == ("I need two tools." if "I need two tools." in rest else "")
    assert events[-1].reason == "tool_calls"


# mlx-lm's own (whole-block) parsers agree with ours on what the templates render
MLX_PARSERS = {"qwen": "json_tools", "qwen3_coder": "qwen3_coder", "glm": "glm47", "mistral": "mistral"}


@pytest.mark.parametrize("family", list(MLX_PARSERS))
def test_agrees_with_mlx_lm_tool_parsers(root, family):
    import importlib

    parser = importlib.import_module(f"mlx_lm.tool_parsers.{MLX_PARSERS[family]}")
    b = ff.backend(family, root)
    history = CONVERSATION[:2]
    prefix = render_prompt(b, history, True)
    # (no whitespace around values: mlx-lm's GLM parser strips it, ours keeps what the template wrote)
    call = ToolCall("call_0003", "write_file", '{"path": "notes/a.md", "content": "# Title\\nline <b>two</b>"}')
    rest = render_prompt(b, history + (Message("assistant", "", tool_calls=(call,)),), False)[len(prefix):]
    end = TURN_END[family]
    if end:
        rest = rest[: rest.index(end)]
    start = rest.index(parser.tool_call_start) + len(parser.tool_call_start)
    block = rest[start: rest.index(parser.tool_call_end, start)] if parser.tool_call_end else rest[start:]
    tools = [{"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS]
    theirs = parser.parse_tool_call(block, tools)

    b.entries = [type(b.entries[0])(rest)]
    events = ff.generate(b, ChatRequest("m", history, TOOLS))
    done = next(e for e in events if isinstance(e, ev.ToolCallDone))
    assert theirs["name"] == "write_file"
    assert json.loads(done.arguments) == theirs["arguments"]


def test_every_family_has_a_fixture():
    assert set(ff.SPECS) == set(FAMILIES) - {"generic", "gemma4", "function_gemma"}


def test_reasoning_level_reaches_the_harmony_template(root):
    b = ff.backend("gpt_oss", root)
    req = ChatRequest("m", CONVERSATION[:2], TOOLS)
    assert "Reasoning: high" in b.prepare(req.with_(reasoning="xhigh")).prompt_text
    assert "Reasoning: low" in b.prepare(req.with_(reasoning="minimal")).prompt_text


def test_mlx_backend_picks_the_family_and_its_stop_tokens(demo_backend):
    tok = demo_backend.tokenizer
    assert demo_backend.family.name == "qwen"
    vocab = tok.get_vocab()
    assert {vocab["<|im_end|>"], vocab["<|endoftext|>"]} <= set(tok.eos_token_ids)


# the opening each template writes only for the turn it generates (prompt/rendering.py), per reasoning level asked
# (MiniMax-M2 keeps a thought sent back in a tool loop's turns: none there)
TRANSIENT = {("qwen", False): "<think>\n\n</think>\n\n", ("deepseek_v3", None): "<think>", ("deepseek_v3", True): "<think>"}


@pytest.mark.parametrize("level", [None, False, True])
@pytest.mark.parametrize("family", list(ff.SPECS))
def test_the_part_of_a_prompt_the_next_turn_repeats(root, family, level):
    """Measured from each family's own template: the next turn, the answer sent back, repeats the prompt but for
    its transient opening (which the prompt cache then lets the next turn's entry supersede), and where there is
    one it does not repeat the whole prompt, whether a user turn or a tool loop follows the answer. Where none is
    known, nothing is claimed."""
    b = ff.backend(family, root)
    first = ChatRequest("m", CONVERSATION[:2], TOOLS, reasoning=level)
    p = b.prepare(first)
    lasting = b.lasting_prompt(p.tokens, first)
    expected = TRANSIENT.get((family, level))
    if expected is None:
        assert lasting is None
        return
    assert b.tokenizer.decode(p.tokens[lasting:]) == expected
    for after in ((Message("assistant", "Sunny."), Message("user", "And then?")),  # a new user turn; a tool loop
                  (Message("assistant", "", CALLS[:1]), Message("tool", "sunny", tool_call_id="call_0001",
                                                                  name="get_weather"))):
        then = b.prepare(ChatRequest("m", CONVERSATION[:2] + after, TOOLS, reasoning=level))
        assert then.tokens[:lasting] == p.tokens[:lasting] and then.tokens[:len(p.tokens)] != p.tokens

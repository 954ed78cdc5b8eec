"""Fields the APIs define that the server does something with, rather than accept and ignore: ``verbosity``
(Chat) and ``text.verbosity`` (Responses) as an instruction the model reads; Anthropic's ``context_management``
``clear_tool_uses_20250919`` edit as the API documents it (old tool results replaced by a placeholder, the
edit reported back). The fields still accepted and ignored are listed in the README with the reason."""

from __future__ import annotations

import pytest

import anthropic_util
import strict
from responses_helpers import client as responses_client, record_prompts
from chat_helpers import client as chat_client
from tinytitan.protocols.common import VERBOSITY
from context_editing_helpers import TOOLS, ask_with_edits, tool_result_conversation

MODEL = "tinytitan-scripted"


@pytest.mark.parametrize("level", ["low", "medium", "high"])
async def test_chat_verbosity_is_an_instruction_the_model_reads(serve, level):
    s = await serve(["Fine."] * 2)
    prompts = record_prompts(s)
    r = await chat_client(s).chat.completions.create(
        model=MODEL, verbosity=level, messages=[{"role": "system", "content": "You help."},
                                                {"role": "user", "content": "hi"}])
    strict.chat_completion(r.model_dump(mode="json", exclude_unset=True))
    await chat_client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                 verbosity=level)
    for prepared in prompts:
        text = prepared.prompt_text
        assert [note in text for note in VERBOSITY.values()] == [lvl == level for lvl in VERBOSITY], text
    assert "You help." in prompts[0].prompt_text


@pytest.mark.parametrize("level", ["low", "high", None])
async def test_responses_text_verbosity_is_an_instruction_the_model_reads(serve, level):
    s = await serve(["Fine."])
    prompts = record_prompts(s)
    r = await responses_client(s).responses.create(model=MODEL, input="hi", instructions="Be kind.",
                                                   **({"text": {"verbosity": level}} if level else {}))
    strict.response(r.model_dump(mode="json", exclude_unset=True))
    assert r.text.verbosity == (level or "medium")
    text = prompts[0].prompt_text
    assert [note in text for note in VERBOSITY.values()] == [lvl == level for lvl in VERBOSITY], text
    assert text.index("Be kind.") < (text.index(VERBOSITY[level]) if level else len(text))


async def test_a_verbosity_the_api_does_not_define_is_refused_by_name(serve):
    import openai

    s = await serve(["Fine."])
    with pytest.raises(openai.BadRequestError) as err:
        await chat_client(s).chat.completions.create(model=MODEL, verbosity="extreme",
                                                     messages=[{"role": "user", "content": "hi"}])
    assert "verbosity" in str(err.value)


# -- Anthropic context editing ----------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
async def test_clear_tool_uses_replaces_the_oldest_results_past_the_trigger(serve, stream):
    from tinytitan.protocols.context_edits import PLACEHOLDER

    s = await serve(["Done."])
    prompts = record_prompts(s)
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 200},
            "keep": {"type": "tool_uses", "value": 2}}
    applied, prompt = await ask_with_edits(s, stream, [edit], tool_result_conversation(5), prompts)
    (report,) = applied["applied_edits"]
    assert report["type"] == "clear_tool_uses_20250919" and report["cleared_tool_uses"] == 3
    assert report["cleared_input_tokens"] > 3 * 40  # three results of 80-odd words each went
    assert [f"RESULT-{i}" in prompt for i in range(5)] == [False, False, False, True, True]
    assert prompt.count(PLACEHOLDER) == 3 and "file0.txt" in prompt  # inputs stay unless asked
    # under the trigger nothing changes, and the answer says so
    applied, prompt = await ask_with_edits(s, stream, [{**edit, "trigger": {"type": "input_tokens", "value": 10**6}}],
                                           tool_result_conversation(5), prompts)
    assert applied == {"applied_edits": []} and all(f"RESULT-{i}" in prompt for i in range(5))


async def test_clear_tool_uses_options(serve):
    s = await serve(["Done."])
    prompts = record_prompts(s)
    base = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 3},
            "keep": {"type": "tool_uses", "value": 1}}
    # exclude_tools: Grep's results stay; clear_tool_inputs: the cleared calls' inputs go too
    applied, prompt = await ask_with_edits(s, False, [{**base, "exclude_tools": ["Grep"], "clear_tool_inputs": True}],
                                           tool_result_conversation(4, ("Read", "Grep")), prompts)
    assert applied["applied_edits"][0]["cleared_tool_uses"] == 2  # tu0, tu2 (Read); tu1 is Grep, tu3 kept
    assert [f"RESULT-{i}" in prompt for i in range(4)] == [False, True, False, True]
    assert "file0.txt" not in prompt and "file2.txt" not in prompt and "file1.txt" in prompt
    # the tool_uses trigger not passed (3 uses, not more than 3)
    applied, prompt = await ask_with_edits(s, False, [base], tool_result_conversation(3), prompts)
    assert applied == {"applied_edits": []}
    # clear_at_least more than clearing would free: the conversation stays whole
    at_least = {**base, "clear_at_least": {"type": "input_tokens", "value": 10**6}}
    applied, prompt = await ask_with_edits(s, False, [at_least], tool_result_conversation(5), prompts)
    assert applied == {"applied_edits": []} and all(f"RESULT-{i}" in prompt for i in range(5))
    # clear_thinking alone: accepted, nothing to clear (earlier thinking is never rendered)
    applied, _ = await ask_with_edits(s, False, [{"type": "clear_thinking_20251015", "keep": "all"}],
                                      tool_result_conversation(2), prompts)
    assert applied == {"applied_edits": []}
    # without context_management the answer has no such field (the non-beta message)
    applied, _ = await ask_with_edits(s, False, None, tool_result_conversation(2), prompts)
    assert applied is None


@pytest.mark.parametrize("edit,param", [
    ({"type": "clear_everything"}, "context_management.edits[0].type"),
    ({"type": "clear_tool_uses_20250919", "keep": {"type": "input_tokens", "value": 3}},
     "context_management.edits[0].keep"),
    ({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": -1}},
     "context_management.edits[0].trigger.value"),
    ({"type": "clear_tool_uses_20250919", "exclude_tools": "Read"}, "context_management.edits[0].exclude_tools"),
])
async def test_a_malformed_edit_is_refused_by_name(serve, edit, param):
    s = await serve(["Done."])
    resp = await anthropic_util.post(s, anthropic_util.body(context_management={"edits": [edit]}))
    anthropic_util.assert_envelope(resp, 400, "invalid_request_error", param.split(".")[-1])


async def test_what_the_newest_codex_sends_is_accepted(serve):
    """Codex 0.17x: ``reasoning.context``, an assistant message's ``phase``, and reasoning items whose null
    ``encrypted_content`` / ``content`` it omits (its ``omit_null_encrypted_content``)."""
    from responses_helpers import post

    s = await serve(["Fine."])
    r = await post(s, "/v1/responses", {
        "model": MODEL, "store": False, "reasoning": {"effort": "low", "summary": "auto", "context": "all_turns"},
        "input": [{"type": "message", "role": "user", "content": "hi"},
                  {"type": "reasoning", "id": "rs_1", "summary": []},
                  {"type": "message", "role": "assistant", "phase": "final_answer",
                   "content": [{"type": "output_text", "text": "Hello."}]},
                  {"type": "message", "role": "user", "content": "again"}]})
    assert r.status_code == 200, r.text
    strict.response(r.json())


async def test_count_tokens_counts_the_edited_conversation(serve):
    s = await serve(["Done."])
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1},
            "keep": {"type": "tool_uses", "value": 1}}
    body = anthropic_util.body(messages=tool_result_conversation(4), tools=TOOLS, max_tokens=None)
    plain = await anthropic_util.post(s, body, "/v1/messages/count_tokens")
    edited = await anthropic_util.post(s, {**body, "context_management": {"edits": [edit]}},
                                       "/v1/messages/count_tokens")
    assert plain.status_code == edited.status_code == 200, edited.text
    strict.tokens_count(plain.json())
    strict.tokens_count(edited.json())
    assert "context_management" not in plain.json()
    assert edited.json()["context_management"]["original_input_tokens"] == plain.json()["input_tokens"]
    assert edited.json()["input_tokens"] < plain.json()["input_tokens"] - 3 * 40

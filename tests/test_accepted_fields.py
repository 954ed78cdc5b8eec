"""Fields the APIs define that the server does something with, rather than accept and ignore: ``verbosity``
(Chat) and ``text.verbosity`` (Responses) as an instruction the model reads; Anthropic's ``context_management``
``clear_tool_uses_20250919`` edit as the API documents it (old tool results replaced by a placeholder, the
edit reported back). The fields still accepted and ignored are listed in the README with the reason."""

from __future__ import annotations

import pytest

import anthropic_util
import strict
from responses_helpers import client as responses_client, record_prompts
from test_chat_completions import client as chat_client
from tinytitan.protocols.common import VERBOSITY

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

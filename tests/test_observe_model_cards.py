"""The model cards, in OpenAI's and Anthropic's shapes: the window, the output cap and what the model can do."""

from __future__ import annotations

import anthropic
from anthropic.types import ModelInfo
from openai.types import Model

from observe_helpers import MODEL, client
from tinytitan.engine.backends.scripted import SCRIPTED_CONTEXT_WINDOW

async def test_model_cards_in_both_shapes(serve):
    s = await serve(["ok"])
    models = await client(s).models.list()
    (card,) = models.data
    Model.model_validate(card.model_dump())
    extra = card.model_extra
    assert extra["context_window"] == SCRIPTED_CONTEXT_WINDOW and extra["max_output_tokens"] == SCRIPTED_CONTEXT_WINDOW
    # the demo template renders tools and has an enable_thinking switch
    assert extra["capabilities"] == {"tools": True, "reasoning": True, "reasoning_levels": ["off", "on"],
                                     "structured_output": True}
    one = await client(s).models.retrieve(MODEL)
    assert one.model_extra["capabilities"] == extra["capabilities"]

    ac = anthropic.AsyncAnthropic(base_url=s.base, api_key="anything", max_retries=0)
    page = await ac.models.list()
    (info,) = page.data
    strict = ModelInfo.model_validate(info.model_dump(exclude_none=True))
    assert strict.max_input_tokens == SCRIPTED_CONTEXT_WINDOW and strict.max_tokens == SCRIPTED_CONTEXT_WINDOW
    assert strict.capabilities.thinking.supported and strict.capabilities.thinking.types.disabled.supported
    assert strict.capabilities.structured_outputs.supported and not strict.capabilities.image_input.supported
    retrieved = await ac.models.retrieve(MODEL)
    assert retrieved.max_input_tokens == SCRIPTED_CONTEXT_WINDOW


async def test_a_template_without_tools_or_thinking_says_so(serve, demo_tok):
    from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

    class Plain:  # a tokenizer whose template renders neither tools nor thinking
        chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"

        def get_vocab(self):
            return {}

    backend = ScriptedBackend([ScriptEntry("ok")], Plain(), model_id="plain")
    card = backend.limits()
    assert card["features"] == {"tools": False, "reasoning": False, "reasoning_levels": [],
                                    "structured_output": True}

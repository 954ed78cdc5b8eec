"""Chat Completions' image detail takes "original" as the OpenAI SDK types it (``ChatCompletionContentPartImageParam``:
auto, low, high, original), as Responses' input_image already does. Before, a Chat request with it was a 400
('original' is not one of ['auto', 'low', 'high']) while the same image on Responses was read."""

from __future__ import annotations

import typing

import pytest
from openai.types.chat.chat_completion_content_part_image_param import ImageURL

from responses_helpers import client as openai_client
from image_helpers import MODEL, PNG, data_url, seeing  # noqa: F401 (the fixture)


def test_the_sdk_types_the_value():
    assert typing.get_args(typing.get_type_hints(ImageURL)["detail"]) == ("auto", "low", "high", "original")


@pytest.mark.parametrize("detail", ["auto", "low", "high", "original"])
async def test_every_detail_the_sdk_types_is_read(seeing, detail):  # noqa: F811
    s, backend = seeing
    r = await openai_client(s).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": data_url(PNG), "detail": detail}}]}])
    assert r.choices[0].message.content == "I see it."
    assert [(p.data, p.where) for p in backend.requests[-1].images] == [(PNG, "messages[0].content[1]")]

"""Messages ``search_result`` blocks (Anthropic's search-results feature, which the SDKs and LangChain's ChatAnthropic
send: a RAG tool's answer inside a ``tool_result``, or pre-fetched results in a user turn) reach the model as text
laid out as documents are (source, title, content), and are counted the same way by count_tokens; citations,
which cannot be produced here, are refused by name."""

from __future__ import annotations

import anthropic
import pytest

from anthropic_util import MODEL, assert_envelope, body, chat_request, message, post, rendered, sdk

RESULT = {"type": "search_result", "source": "https://example.com/colors", "title": "Colors of nature",
          "content": [{"type": "text", "text": "The grass is green."}, {"type": "text", "text": "The sky is blue."}],
          "citations": {"enabled": False}, "cache_control": {"type": "ephemeral"}}
LAID_OUT = ("<search_result>\n<source>https://example.com/colors</source>\n<title>Colors of nature</title>\n"
            "<search_result_content>\nThe grass is green.\n\nThe sky is blue.\n</search_result_content>\n"
            "</search_result>")
QUESTION = {"type": "text", "text": "What color is the grass?"}
SEARCH = {"name": "search", "input_schema": {"type": "object"}}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}]}


def in_result(*blocks) -> list[dict]:
    return [{"role": "user", "content": "look it up"}, CALL,
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": list(blocks)}]}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_search_result_in_a_user_turn_reaches_the_model_and_is_counted_so(serve, stream):
    s = await serve(["Green."] * 2)
    messages = [{"role": "user", "content": [RESULT, QUESTION]}]
    assert f"{LAID_OUT}\n\n{QUESTION['text']}" in rendered(s, body(messages=messages))
    m = await message(sdk(s), stream, model=MODEL, max_tokens=50, messages=messages)  # checked strictly by serve
    assert m.content[0].text == "Green." and m.stop_reason == "end_turn"
    counted = (await post(s, body(messages=messages), "/v1/messages/count_tokens")).json()["input_tokens"]
    assert counted == m.usage.input_tokens == len(s.engine.backend.encode(chat_request(s, body(messages=messages)))[1])


async def test_search_results_in_a_tool_result_reach_the_model(serve):
    s = await serve(["ok"])
    other = dict(RESULT, source="https://example.com/sky", title="Sky", content=[{"type": "text", "text": "Blue."}])
    messages = in_result(RESULT, other)
    prompt = rendered(s, body(tools=[SEARCH], messages=messages))
    assert LAID_OUT in prompt and "<source>https://example.com/sky</source>\n<title>Sky</title>" in prompt
    assert prompt.index(LAID_OUT) < prompt.index("<title>Sky</title>")  # in the order the tool gave them
    m = await sdk(s).messages.create(model=MODEL, max_tokens=20, tools=[SEARCH], messages=messages)
    assert m.content[0].text == "ok"


REFUSED = [  # (the block, the words of the refusal)
    (dict(RESULT, citations={"enabled": True}), "'citations' at {at}.citations.enabled is not supported"),
    (dict(RESULT, content=[{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}]),
     "search_result content block type 'image' at {at}.content[0].type is not supported"),
    ({k: v for k, v in RESULT.items() if k != "title"}, "{loc}.title: Field required"),  # the API's words and place
    (dict(RESULT, content="The grass is green."), "{loc}.content: Input should be a valid list"),
]


@pytest.mark.parametrize("block, words", REFUSED, ids=["citations", "image", "no-title", "content-string"])
@pytest.mark.parametrize("nested", [False, True], ids=["turn", "tool_result"])
async def test_what_a_search_result_cannot_be_here_is_refused_by_name(serve, block, words, nested):
    s = await serve(["never"])
    if nested:
        messages, at = in_result(block), "messages[2].content[0].content[0]"
        loc = "messages.2.content.0.tool_result.content.0.search_result"
    else:
        messages, at = [{"role": "user", "content": [block, QUESTION]}], "messages[0].content[0]"
        loc = "messages.0.content.0.search_result"
    r = await post(s, body(tools=[SEARCH], messages=messages))
    assert_envelope(r, 400, "invalid_request_error", words.format(at=at, loc=loc))
    with pytest.raises(anthropic.BadRequestError):  # what a client built on the SDK catches
        await sdk(s).messages.count_tokens(model=MODEL, tools=[SEARCH], messages=messages)


async def test_a_search_result_in_an_assistant_turn_is_refused_by_name(serve):
    s = await serve(["never"])
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [RESULT]},
                {"role": "user", "content": "and?"}]
    r = await post(s, body(messages=messages))
    assert_envelope(r, 400, "invalid_request_error", "'search_result' at messages[1].content[0]")

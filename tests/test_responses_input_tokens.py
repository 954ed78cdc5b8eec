"""POST /v1/responses/input_tokens (the SDK's ``responses.input_tokens.count``): the input tokens of the prompt
a response to the same request reads, the chain of ``previous_response_id`` included."""

from __future__ import annotations

import openai
import pytest

import strict
from responses_helpers import MODEL, client, post

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
           "strict": False}


async def test_the_count_is_the_input_a_response_reads(serve):
    s = await serve(["Fine.", "Still fine."])
    c = client(s)
    args = {"model": MODEL, "input": "How are you?", "instructions": "Be brief.", "tools": [WEATHER]}
    counted = await c.responses.input_tokens.count(**args)
    first = await c.responses.create(**args)
    assert counted.input_tokens == first.usage.input_tokens > 0
    alone = await c.responses.input_tokens.count(model=MODEL, input="And now?")
    chained = {"model": MODEL, "input": "And now?", "previous_response_id": first.id}
    counted = await c.responses.input_tokens.count(**chained)
    second = await c.responses.create(**chained)
    assert counted.input_tokens == second.usage.input_tokens > alone.input_tokens


async def test_the_answer_is_the_apis_object(serve):
    s = await serve(["Fine."])
    r = await post(s, "/v1/responses/input_tokens", {"model": MODEL, "input": "hi"})
    assert r.status_code == 200, r.text
    strict.input_token_count(r.content)
    assert set(r.json()) == {"object", "input_tokens"}


@pytest.mark.parametrize("extra,param", [({"stream": True}, "stream"), ({"max_output_tokens": 5}, "max_output_tokens"),
                                         ({"previous_response_id": "resp_nothing"}, "resp_nothing")])
async def test_what_a_count_does_not_take_is_refused(serve, extra, param):
    s = await serve(["Fine."])
    with pytest.raises((openai.BadRequestError, openai.NotFoundError)) as err:
        await client(s).responses.input_tokens.count(model=MODEL, input="hi", extra_body=extra)
    assert param in str(err.value)

"""``metadata`` past the API's limits (16 keys, keys of 64 characters, values of 512) is refused in OpenAI's own
words, param and code: the sentences its validator writes for any object or string past its bound."""

from __future__ import annotations

import pytest

from responses_helpers import MODEL, post


@pytest.mark.parametrize("metadata,param,code,message", [
    ({f"k{i}": "v" for i in range(17)}, "metadata", "object_above_max_properties",
     "Invalid 'metadata': too many properties. Expected an object with at most 16 properties, but got an object "
     "with 17 properties instead."),
    ({"k" * 65: "v"}, "metadata." + "k" * 65, "property_name_above_max_length",
     "Invalid property name in 'metadata': '" + "k" * 65 + "' is too long. Expected a string with maximum length 64, "
     "but got a string with length 65 instead."),
    ({"key": "界" * 513}, "metadata.key", "string_above_max_length",
     "Invalid 'metadata.key': string too long. Expected a string with maximum length 512, but got a string with "
     "length 513 instead."),
])
async def test_metadata_past_its_limits_in_the_apis_words(serve, metadata, param, code, message):
    s = await serve(["x"])
    r = await post(s, "/v1/responses", {"model": MODEL, "input": "hi", "metadata": metadata})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": message, "type": "invalid_request_error", "param": param, "code": code}


async def test_metadata_at_its_limits_is_taken(serve):
    s = await serve(["x"])
    metadata = {f"{i:02d}" + "k" * 62: "界" * 512 for i in range(16)}
    r = await post(s, "/v1/responses", {"model": MODEL, "input": "hi", "metadata": metadata})
    assert r.status_code == 200 and r.json()["metadata"] == metadata

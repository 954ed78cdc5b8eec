"""The one mapping from what a protocol stream's events raised, once the stream is open, to its ``Failed`` event
(protocols/failure.py): a lone answer's stream and each choice of several end on the same event. An ``ApiError``
there is the request's refusal, kept whole; the engine's in-band ``Failed.in_generation`` (events.py) is a
generation that broke after it started, and keeps an ``ApiError``'s kind only where the model cannot generate now."""

from __future__ import annotations

import trio

from tinytitan.errors import ApiError, invalid
from tinytitan.events import Failed, TextDelta
from tinytitan.protocols.choices import _failing_in_band
from tinytitan.protocols.failure import refusal_or_failure


def test_an_api_error_keeps_its_kind_message_and_code():
    exc = ApiError("server_error", "model 'm' could not be loaded (OSError: gone)", code="model_load_failed")
    assert refusal_or_failure(exc) == Failed("model 'm' could not be loaded (OSError: gone)", type="server_error",
                                     code="model_load_failed")
    assert refusal_or_failure(ApiError("unavailable", "the group is broken")) == Failed("the group is broken",
                                                                               type="unavailable", code=None)


def test_anything_else_is_a_server_error_that_says_generation_failed():
    assert refusal_or_failure(RuntimeError("Metal ran out of memory")) == Failed(
        "generation failed: Metal ran out of memory", type="server_error", code=None)


def test_a_broken_generation_is_a_server_error_in_band_save_an_unavailable_model():
    """The difference the two names say: a refusal's kind and code go out as the request's; a generation that broke
    after it started is the server's failure (an ``invalid_request`` raised then is not the client's 400), unless
    the model cannot generate now, which a client is told as a new request would be (503 group_broken)."""
    refused = invalid("'suffix' is not supported", param="suffix", code="unsupported_parameter")
    assert refusal_or_failure(refused) == Failed("'suffix' is not supported", type="invalid_request",
                                                 code="unsupported_parameter")
    assert Failed.in_generation(refused) == Failed("generation failed: 'suffix' is not supported", type="server_error")
    broken = ApiError("unavailable", "the group is broken", code="group_broken")
    assert Failed.in_generation(broken) == Failed("generation failed: the group is broken", type="unavailable",
                                                  code="group_broken")
    metal = RuntimeError("Metal ran out of memory")
    assert Failed.in_generation(metal) == refusal_or_failure(metal)  # (one wording of a broken generation)


def test_a_choice_ends_on_the_same_event():
    exc = ApiError("overloaded", "the queue is full", code="queue_full")

    async def events():
        yield TextDelta("partial")
        raise exc

    async def read():
        return [ev async for ev in _failing_in_band(events(), lambda ev: ev.code or ev.type)]

    assert trio.run(read) == [TextDelta("partial"), Failed("the queue is full", type="overloaded", code="queue_full")]

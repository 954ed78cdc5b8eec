"""The one mapping from what a generation raised, once its stream is open, to the protocol's ``Failed`` event
(protocols/failure.py): a lone answer's stream and each choice of several end on the same event."""

from __future__ import annotations

import trio

from tinytitan.errors import ApiError
from tinytitan.events import Failed, TextDelta
from tinytitan.protocols.choices import _failing_in_band
from tinytitan.protocols.failure import failure_of


def test_an_api_error_keeps_its_kind_message_and_code():
    exc = ApiError("server_error", "model 'm' could not be loaded (OSError: gone)", code="model_load_failed")
    assert failure_of(exc) == Failed("model 'm' could not be loaded (OSError: gone)", type="server_error",
                                     code="model_load_failed")
    assert failure_of(ApiError("unavailable", "the group is broken")) == Failed("the group is broken",
                                                                               type="unavailable", code=None)


def test_anything_else_is_a_server_error_that_says_generation_failed():
    assert failure_of(RuntimeError("Metal ran out of memory")) == Failed(
        "generation failed: Metal ran out of memory", type="server_error", code=None)


def test_a_choice_ends_on_the_same_event():
    exc = ApiError("overloaded", "the queue is full", code="queue_full")

    async def events():
        yield TextDelta("partial")
        raise exc

    async def read():
        return [ev async for ev in _failing_in_band(events(), lambda ev: ev.code or ev.type)]

    assert trio.run(read) == [TextDelta("partial"), Failed("the queue is full", type="overloaded", code="queue_full")]

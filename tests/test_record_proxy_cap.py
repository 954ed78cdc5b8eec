"""``record_proxy.py --max-tokens N``: every model request's answer capped, in each API's own budget field, so an
end-to-end test on a random-weight model is not spent on thousands of tokens of gibberish."""

from __future__ import annotations

from record_asking_tool import load_record_asking


def test_each_api_gets_its_own_budget_field_lowered_or_set():
    capped = load_record_asking().capped
    assert capped("/v1/chat/completions", {"messages": []}, 64) == {"messages": [], "max_tokens": 64}
    assert capped("/v1/chat/completions", {"max_completion_tokens": 32000}, 64) == {"max_completion_tokens": 64}
    assert capped("/v1/chat/completions", {"max_tokens": 10}, 64) == {"max_tokens": 10}  # already under the cap
    assert capped("/v1/responses", {"input": "hi"}, 64) == {"input": "hi", "max_output_tokens": 64}
    assert capped("/v1/messages", {"max_tokens": 32000}, 64) == {"max_tokens": 64}
    sent = {"max_tokens": 32000}
    capped("/v1/messages", sent, 64)
    assert sent == {"max_tokens": 32000}  # the request as the client sent it is what the record holds


def test_a_budget_sent_as_null_is_capped_not_a_crash():
    """OpenAI's and Anthropic's SDK types let a client send its budget as null (no limit): capped like one not
    sent, not a TypeError that drops the client's connection."""
    capped = load_record_asking().capped
    assert capped("/v1/chat/completions", {"max_tokens": None}, 64) == {"max_tokens": 64}
    assert capped("/v1/chat/completions", {"max_completion_tokens": None}, 64) == {"max_completion_tokens": 64}
    assert capped("/v1/responses", {"max_output_tokens": None}, 64) == {"max_output_tokens": 64}

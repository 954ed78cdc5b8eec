"""Parameters of the openai SDK's create methods that libraries forward (openai-agents' ModelSettings,
LangChain's model_kwargs): each is taken where it changes nothing here, and refused by name where it asks for
what this server does not do, never "Unrecognized"."""

from __future__ import annotations

import httpx
import openai
import pytest

import strict
from chat_helpers import MODEL, USER, client as chat_client


@pytest.mark.parametrize("options", [{"mode": "implicit", "ttl": "30m"}, {"mode": "explicit"}, {}])
async def test_chat_accepts_the_prompt_cache_options_the_sdk_defines(serve, options):
    """``prompt_cache_options`` is a Chat Completions parameter of the openai SDK (``chat.completions.create``),
    and openai-agents forwards ``ModelSettings(prompt_cache_options=…)`` to Chat Completions as it does to
    Responses (which accepts it): the cache matches token prefixes, so it is accepted and changes nothing."""
    s = await serve(["Fine."])
    r = await chat_client(s).chat.completions.create(model=MODEL, messages=USER, prompt_cache_options=options)
    strict.chat_completion(r.model_dump(mode="json", exclude_unset=True))
    assert r.choices[0].message.content == "Fine."


@pytest.mark.parametrize("options", [{"mode": "sometimes"}, {"ttl": "1y"}, {"comparison_response_id": "resp_x"}, "x"])
async def test_chat_refuses_prompt_cache_options_the_api_does_not_define(serve, options):
    s = await serve(["Fine."])
    with pytest.raises(openai.BadRequestError) as err:
        await chat_client(s).chat.completions.create(model=MODEL, messages=USER, prompt_cache_options=options)
    assert "prompt_cache_options" in str(err.value)


@pytest.mark.parametrize("path,extra,named", [
    ("/v1/chat/completions", {"moderation": {"policy": {"input": {"mode": "block"}}}}, "'moderation'"),
    ("/v1/responses", {"moderation": {}}, "'moderation'"),
    ("/v1/responses", {"access_programs": {"cyber": "standard"}}, "'access_programs'"),
    ("/v1/responses", {"background_options": {"completion_window": "soonest"}}, "'background_options'"),
    ("/v1/responses", {"image": {"context_compression": "enabled"}}, "'image.context_compression'"),
])
async def test_what_this_server_does_not_do_is_refused_by_name(serve, path, extra, named):
    s = await serve(["Fine."])
    body = {"model": MODEL, **({"messages": USER} if "chat" in path else {"input": "hi"}), **extra}
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url(path), json=body)
    assert r.status_code == 400, r.text
    strict.openai_error(r.content)
    assert named in r.json()["error"]["message"] and "not supported" in r.json()["error"]["message"]


@pytest.mark.parametrize("value", ["auto", "disabled"])
async def test_image_options_that_change_nothing_are_taken(serve, value):
    s = await serve(["Fine."])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": "hi",
                                                        "image": {"context_compression": value}})
    assert r.status_code == 200, r.text
    strict.response(r.content)


@pytest.mark.parametrize("extra", [{"prompt_cache_options": {"mode": "explicit", "ttl": "30m"}},
                                   {"safety_identifier": "user-1"}])
async def test_the_compact_route_takes_what_the_docs_say_it_ignores(serve, extra):
    """docs/protocols/index.md: prompt_cache_options and safety_identifier are accepted and ignored on the compact
    route too, and the SDK's ``responses.compact`` defines both."""
    s = await serve(["A summary."])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/v1/responses/compact"), json={"model": MODEL, "input": "hi", **extra})
    assert r.status_code == 200, r.text

"""A model name on Ollama's routes, read as Ollama's server reads it (types/model/name.go ``ParseName``,
server/routes.go ``getExistingName``): parts compared without regard to case, and the host, namespace and tag it
leaves out filled in (``registry.ollama.ai``, ``library``, ``latest``). The answer names the model as it was sent,
as Ollama's does. The OpenAI and Anthropic routes keep their exact names."""

from __future__ import annotations

import httpx
import pytest

from backends import Asked
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.models.names import ollama_spelling

MODEL = "tinytitan-scripted"
USER = [{"role": "user", "content": "hi"}]
SAME = ["Tinytitan-Scripted", "TINYTITAN-SCRIPTED:LATEST", "library/tinytitan-scripted", "Library/Tinytitan-Scripted",
        "registry.ollama.ai/library/tinytitan-scripted:latest", "Registry.Ollama.AI/library/tinytitan-scripted",
        " tinytitan-scripted ", "tinytitan-scripted:local"]
OTHER = ["tinytitan-scripted:7b", "other.host/library/tinytitan-scripted", "someone/tinytitan-scripted",
         "tinytitan-scripted:cloud",
         # a cloud source after a tag (internal/modelref ParseRef sets ':cloud' aside): a name, not served here
         "tinytitan-scripted:latest:cloud", "tinytitan-scripted:7b:CLOUD", "library/tinytitan-scripted:7b:cloud",
         # a '-cloud' tag (ParseRef's legacy spelling): the name Ollama checks is its base, ``tinytitan-scripted:7b``
         # (server/routes.go parseAndValidateModelRef), spaces around the tag trimmed, so a name it reads
         "tinytitan-scripted: 7b-cloud"]
# not a name to Ollama (types/model/name.go IsValid): a space, a '!', a ':' inside the model part, an empty tag
INVALID = ["tinytitan scripted", "bad name!", "a:b:c", "tinytitan-scripted:", "ünïcode"]


@pytest.mark.parametrize("name", SAME)
async def test_every_spelling_ollama_reads_as_the_served_name_is_served(serve, demo_tok, name):
    backend = Asked([ScriptEntry("a")] * 4, demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    async with httpx.AsyncClient() as h:
        chat = await h.post(s.url("/api/chat"), json={"model": name, "messages": USER, "stream": False})
        generate = await h.post(s.url("/api/generate"), json={"model": name, "prompt": "hi", "stream": False})
        load = await h.post(s.url("/api/chat"), json={"model": name, "stream": False})
        show = await h.post(s.url("/api/show"), json={"model": name})
    for r in (chat, generate, load, show):
        assert r.status_code == 200, r.text
    assert chat.json()["model"] == generate.json()["model"] == load.json()["model"] == name  # as sent, as Ollama
    assert [r.model for r in backend.requests] == [MODEL, MODEL]


@pytest.mark.parametrize("name", OTHER)
async def test_a_name_ollama_reads_as_another_is_its_404(serve, name):
    s = await serve(["a"])
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json={"model": name, "messages": USER, "stream": False})
    assert r.status_code == 404 and r.json()["error"].startswith(f'model "{name}" not found'), r.text


@pytest.mark.parametrize("name", INVALID)
async def test_a_name_ollama_cannot_read_is_its_400(serve, name):
    """Ollama's chat, generate and show handlers answer 400 "invalid model name" (server/routes.go
    writeModelRefParseError, errtypes.InvalidModelNameErrMsg) before they look for the model, not its 404."""
    s = await serve(["a"])
    async with httpx.AsyncClient() as h:
        for path, body in (("/api/chat", {"messages": USER, "stream": False}), ("/api/chat", {}),
                           ("/api/generate", {"prompt": "hi", "stream": False}), ("/api/show", {})):
            r = await h.post(s.url(path), json={"model": name, **body})
            assert r.status_code == 400 and r.json() == {"error": "invalid model name"}, (path, r.text)


async def test_a_served_id_ollama_could_not_read_is_still_served_as_sent(serve):
    s = await serve(["a"], model_id="my model")
    async with httpx.AsyncClient() as h:
        r = await h.post(s.url("/api/chat"), json={"model": "my model", "messages": USER, "stream": False})
    assert r.status_code == 200 and r.json()["model"] == "my model", r.text


async def test_a_served_id_with_a_namespace_is_read_as_ollama_reads_one(serve):
    s = await serve(["a"] * 3, model_id="mlx-community/Tiny-Model")
    async with httpx.AsyncClient() as h:
        for name in ("MLX-Community/tiny-model:latest", "registry.ollama.ai/mlx-community/Tiny-Model",
                     "mlx-community/Tiny-Model-FAST"):
            r = await h.post(s.url("/api/generate"), json={"model": name, "prompt": "hi", "stream": False})
            assert r.status_code == 200, (name, r.text)
        r = await h.post(s.url("/api/generate"), json={"model": "library/Tiny-Model", "prompt": "hi", "stream": False})
        assert r.status_code == 404


@pytest.mark.parametrize("name", ["Tinytitan-Scripted", "library/tinytitan-scripted"])
async def test_the_openai_and_anthropic_routes_keep_exact_names(serve, name):
    s = await serve(["a"])
    async with httpx.AsyncClient() as h:
        chat = await h.post(s.url("/v1/chat/completions"), json={"model": name, "messages": USER})
        messages = await h.post(s.url("/v1/messages"), json={"model": name, "max_tokens": 5, "messages": USER},
                                headers={"anthropic-version": "2023-06-01"})
    assert chat.status_code == 404 and messages.status_code == 404


def test_the_exact_spelling_wins_where_two_served_ids_differ_only_in_case():
    assert ollama_spelling("Demo", ["demo", "Demo"]) == "Demo"
    assert ollama_spelling("DEMO", ["demo", "Demo"]) == "demo"   # (then the first, in the order served)


@pytest.mark.parametrize("name", ["tinytitan-scripted:local:cloud", "tinytitan-scripted:cloud:local",
                                  " tinytitan-scripted:7b:Local:CLOUD ", "tinytitan-scripted:7b-cloud:local",
                                  "tinytitan-scripted:local:local"])
async def test_a_name_with_two_sources_is_ollamas_400(serve, name):
    """Ollama's ParseRef (internal/modelref) refuses a name whose source is given twice, and its chat, generate
    and show handlers answer that 400 with the name quoted (writeModelRefParseError), not a 404."""
    s = await serve(["a"])
    quoted = '"' + name.strip() + '"'
    async with httpx.AsyncClient() as h:
        for path, body in (("/api/chat", {"messages": USER, "stream": False}), ("/api/chat", {}),
                           ("/api/chat", {"messages": USER, "stream": True}),
                           ("/api/generate", {"prompt": "hi", "stream": False}), ("/api/show", {})):
            r = await h.post(s.url(path), json={"model": name, **body})
            assert r.status_code == 400, (path, r.text)
            assert r.json() == {"error": f"use either :local or :cloud, not both: {quoted}"}, (path, r.text)

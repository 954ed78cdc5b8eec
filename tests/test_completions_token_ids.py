"""Legacy Completions' prompt given as token ids (lm-evaluation-harness's ``local-completions`` sends them by
default; the OpenAI SDK types ``prompt`` as ``Iterable[int]`` too): read as exactly those ids, never decoded and
tokenized again, each checked against the model's vocabulary (a 400 naming ``prompt`` past it)."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types import Completion

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry

MODEL = "tinytitan-scripted"


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


class Recording(ScriptedBackend):
    """The scripted backend, keeping the ids each request's prompt was read as."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[list[int]] = []

    def decode(self, prepared, loop, should_stop):
        self.prompts.append(list(prepared.tokens))
        super().decode(prepared, loop, should_stop)


def spelled_apart(tok, text: str) -> list[int]:
    """``text`` as one token per character: ids its tokenizer would never write for it (it merges them)."""
    ids = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
    assert ids != tok.encode(text, add_special_tokens=False)  # (else the test could not tell)
    return ids


@pytest.mark.parametrize("shape", ["ids", "list of one list"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_of_token_ids_is_read_as_exactly_those_ids(serve, demo_tok, shape, stream):
    backend = Recording([ScriptEntry(" continued")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    ids = spelled_apart(demo_tok, "hello world")
    prompt = ids if shape == "ids" else [ids]
    c = client(s)
    if stream:
        chunks = [ch async for ch in await c.completions.create(model=MODEL, prompt=prompt, stream=True,
                                                                  stream_options={"include_usage": True})]
        text = "".join(choice.text for ch in chunks for choice in ch.choices)
        usage = chunks[-1].usage
    else:
        r = await c.completions.create(model=MODEL, prompt=prompt)
        Completion.model_validate(r.model_dump())
        text, usage = r.choices[0].text, r.usage
    assert text == " continued"
    assert backend.prompts == [ids]  # not re-tokenized, no opening token added
    assert usage.prompt_tokens == len(ids)


@pytest.mark.parametrize("prompt, words", [
    ([1, 2, 10**6], "Invalid token id 1000000 in 'prompt'"),
    ([[5, -1]], "Invalid token id -1 in 'prompt'"),
])
async def test_an_id_outside_the_vocabulary_is_refused_naming_prompt(serve, prompt, words):
    s = await serve(["never"])
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            await client(s).completions.create(model=MODEL, prompt=prompt, stream=stream)
        assert err.value.body["param"] == "prompt" and words in err.value.body["message"]


@pytest.mark.parametrize("extra, param", [({"suffix": "x"}, "suffix"),
                                          ({"prompt": [1, True]}, "prompt[1]")])
async def test_what_a_prompt_of_ids_cannot_do_is_refused_by_name(serve, extra, param):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": [1, 2], **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


async def test_the_demo_model_continues_token_ids_as_it_continues_their_text(serve, demo_backend):
    s = await serve(backend=demo_backend)
    c = client(s)
    ids = demo_backend.tokenizer.encode("def main():\n", add_special_tokens=False)
    asked = dict(model=demo_backend.model_id, max_tokens=6, temperature=0)
    by_ids = await c.completions.create(prompt=ids, **asked)
    by_text = await c.completions.create(prompt="def main():\n", **asked)
    assert by_ids.usage.prompt_tokens == len(ids)
    assert by_ids.choices[0].text == by_text.choices[0].text

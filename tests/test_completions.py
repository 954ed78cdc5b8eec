"""Legacy OpenAI Completions (/v1/completions) end to end, with the openai SDK: a raw prompt continued
without the chat template, stream and not, echo, stop, usage, fill-in-the-middle through a tokenizer's FIM
tokens, and the refusals by name."""

from __future__ import annotations

import logging

import httpx
import openai
import pytest
from openai.types import Completion

from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry, demo_tokenizer

MODEL = "tinytitan-scripted"
FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


class Recording(ScriptedBackend):
    """The scripted backend, keeping the prompt text each request was rendered to."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    def decode(self, prepared, loop, should_stop):
        self.prompts.append(prepared.prompt_text)
        super().decode(prepared, loop, should_stop)


async def test_a_raw_prompt_is_continued_without_the_chat_template(serve, demo_tok):
    backend = Recording([ScriptEntry(" return a + b\n")], demo_tok, model_id=MODEL)
    s = await serve(backend=backend)
    prompt = "def add(a, b):\n"
    r = await client(s).completions.create(model=MODEL, prompt=prompt, max_tokens=50, temperature=0.2, seed=7)
    Completion.model_validate(r.model_dump())
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == MODEL
    (choice,) = r.choices
    assert choice.text == " return a + b\n" and choice.finish_reason == "stop" and choice.index == 0
    assert backend.prompts == [prompt]  # no chat template around it
    assert r.usage.prompt_tokens == len(demo_tok.encode(prompt, add_special_tokens=False))
    assert r.usage.completion_tokens == len(demo_tok.encode(" return a + b\n", add_special_tokens=False))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


async def test_stream_with_usage_matches_non_stream(serve):
    s = await serve(["<think>markers stay text</think> and more"])
    c = client(s)
    folded = await c.completions.create(model=MODEL, prompt=["Once upon a time"], max_tokens=100)
    stream = await c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=100, stream=True,
                                        stream_options={"include_usage": True})
    text, finish, usage, seen = "", None, None, set()
    async for chunk in stream:
        # (the SDK's type says finish_reason is never null; OpenAI's own streams send null until the end)
        assert chunk.object == "text_completion" and chunk.id == chunks_id(chunk, seen)
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.text
            finish = ch.finish_reason or finish
    assert text == folded.choices[0].text == "<think>markers stay text</think> and more"
    assert finish == folded.choices[0].finish_reason == "stop"
    assert usage.prompt_tokens == folded.usage.prompt_tokens
    assert usage.completion_tokens == folded.usage.completion_tokens
    assert usage.completion_tokens_details.reasoning_tokens == 0  # a raw completion has no reasoning channel
    assert len(seen) == 1
    Completion.model_validate(folded.model_dump())


def chunks_id(chunk, seen: set) -> str:
    seen.add(chunk.id)
    return chunk.id


async def test_max_tokens_defaults_to_16_and_stops_cut_the_text(serve):
    s = await serve(["one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                     "sixteen seventeen eighteen", "alpha beta STOP gamma"])
    c = client(s)
    capped = await c.completions.create(model=MODEL, prompt="count:")
    assert capped.choices[0].finish_reason == "length" and capped.usage.completion_tokens == 16
    stopped = await c.completions.create(model=MODEL, prompt="letters:", stop=["STOP"], max_tokens=40)
    assert stopped.choices[0].text == "alpha beta " and stopped.choices[0].finish_reason == "stop"


# what Continue's autocomplete sends a local server: its whole list (it cuts to 4 for api.openai.com alone)
AUTOCOMPLETE_STOPS = ["\n\n", "\r\n\r\n", "/src/", "#- coding: utf-8", "```", "\ndef", "\nclass", "\n\"\"\"#",
                      "\nif", "\nfor", "\nwhile", "\nimport", "\nfrom", "\n@"]


async def test_more_stop_sequences_than_openai_takes_all_stop_the_text(serve):
    s = await serve(["    return a + b\nclass Other:\n", "    return a + b\nclass Other:\n"])
    c = client(s)
    r = await c.completions.create(model=MODEL, prompt="def add(a, b):\n", stop=AUTOCOMPLETE_STOPS, max_tokens=40)
    assert r.choices[0].text == "    return a + b" and r.choices[0].finish_reason == "stop"
    stream = await c.completions.create(model=MODEL, prompt="def add(a, b):\n", stop=AUTOCOMPLETE_STOPS,
                                        max_tokens=40, stream=True)
    assert "".join([ch.text async for chunk in stream for ch in chunk.choices]) == "    return a + b"
    with pytest.raises(openai.BadRequestError) as err:  # past the server's bound: refused in OpenAI's words
        await c.completions.create(model=MODEL, prompt="x", stop=["s"] * 257)
    assert err.value.body["param"] == "stop" and err.value.body["code"] == "array_above_max_length"
    assert err.value.body["message"] == ("Invalid 'stop': array too long. Expected an array with maximum length 256, "
                                         "but got an array with length 257 instead.")


async def test_echo_puts_the_prompt_first(serve):
    s = await serve(["world"])
    c = client(s)
    r = await c.completions.create(model=MODEL, prompt="hello ", echo=True, max_tokens=5)
    assert r.choices[0].text == "hello world"
    stream = await c.completions.create(model=MODEL, prompt="hello ", echo=True, max_tokens=5, stream=True)
    texts = [ch.text async for chunk in stream for ch in chunk.choices]
    assert texts[0] == "hello " and "".join(texts) == "hello world"


async def test_fill_in_the_middle_with_a_tokenizer_that_has_fim_tokens(serve):
    tok = demo_tokenizer()  # a fresh copy: the shared one stays without FIM tokens
    tok.add_special_tokens({"additional_special_tokens": list(FIM)})
    backend = Recording([ScriptEntry("    return a + b")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    c = client(s)
    r = await c.completions.create(model=MODEL, prompt="def add(a, b):\n", suffix="\n\nprint(add(1, 2))\n",
                                   max_tokens=20)
    assert r.choices[0].text == "    return a + b"
    expected = "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
    assert backend.prompts == [expected]
    ids = tok.encode(expected, add_special_tokens=False)
    assert r.usage.prompt_tokens == len(ids)
    vocab = tok.get_vocab()
    assert all(vocab[t] in ids for t in FIM)  # each marker is its one special token, not spelled out
    stream = await c.completions.create(model=MODEL, prompt="x = ", suffix="\n", max_tokens=20, stream=True)
    assert "".join([ch.text async for chunk in stream for ch in chunk.choices]) == "    return a + b"


@pytest.mark.parametrize("markers", [
    ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>", "<\uff5cfim\u2581end\uff5c>"),  # DeepSeek-Coder
    ("\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>"),  # CodeLlama: its tokenizer's spelling (transformers' CodeLlamaTokenizer)
    ("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),  # SantaCoder (llama.cpp's llama-vocab.cpp knows each of these)
    ("<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"),  # GLM-4.5
    ("<|prefix|>", "<|suffix|>", "<|middle|>"),  # Falcon-H1-Tiny-Coder
], ids=["deepseek-coder", "codellama", "santacoder", "glm-4.5", "falcon-h1-coder"])
async def test_fill_in_the_middle_with_other_code_models_markers(serve, markers):
    """Continue and Twinny send DeepSeek-Coder and CodeLlama a suffix; each model's vocabulary spells its markers
    its own way (once refused: only Qwen's, StarCoder's and a CodeLlama spelling no tokenizer of it has were
    known)."""
    tok = demo_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": list(markers)})
    backend = Recording([ScriptEntry("    return a + b")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await client(s).completions.create(model=MODEL, prompt="def add(a, b):\n", suffix="\nprint(add(1, 2))\n",
                                           max_tokens=20, stop=["\n\n", markers[0]], temperature=0.01)
    Completion.model_validate(r.model_dump())
    assert r.choices[0].text == "    return a + b"
    expected = f"{markers[0]}def add(a, b):\n{markers[1]}\nprint(add(1, 2))\n{markers[2]}"
    assert backend.prompts == [expected]
    ids, vocab = tok.encode(expected, add_special_tokens=False), tok.get_vocab()
    assert all(vocab[t] in ids for t in markers) and r.usage.prompt_tokens == len(ids)
    async with httpx.AsyncClient() as h:  # Ollama's name for it, where a client asks the model's capabilities
        shown = (await h.post(s.url("/api/show"), json={"model": MODEL})).json()
    assert "insert" in shown["capabilities"]


async def test_fill_in_the_middle_with_mistral_markers_puts_the_suffix_first(serve):
    """Codestral (Mistral's v2/v3 tokenizers) reads the suffix first and goes on from the prefix, with no middle
    marker (mistral_common's encode_fim, Ollama's codestral template); once refused as a model without FIM."""
    tok = demo_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["[PREFIX]", "[SUFFIX]", "[MIDDLE]"]})
    backend = Recording([ScriptEntry("    return a + b")], tok, model_id=MODEL)
    s = await serve(backend=backend)
    r = await client(s).completions.create(model=MODEL, prompt="def add(a, b):\n", suffix="\nprint(add(1, 2))\n",
                                           max_tokens=20)
    Completion.model_validate(r.model_dump())
    assert r.choices[0].text == "    return a + b"
    assert backend.prompts == ["[SUFFIX]\nprint(add(1, 2))\n[PREFIX]def add(a, b):\n"]


async def test_suffix_is_refused_by_name_without_fim_tokens(serve):
    s = await serve(["never"])
    with pytest.raises(openai.BadRequestError) as err:
        await client(s).completions.create(model=MODEL, prompt="a", suffix="b")
    assert err.value.body["param"] == "suffix" and "fill-in-the-middle" in err.value.body["message"]


@pytest.mark.parametrize("extra, param", [
    ({"n": 129}, "n"), ({"best_of": 3}, "best_of"), ({"logprobs": 6}, "logprobs"), ({"max_tokens": 0}, "max_tokens"),
    ({"prompt": ["a"] * 129}, "prompt"), ({"prompt": [{"a": 1}]}, "prompt[0]"),
    ({"prompt": []}, "prompt"),
    ({"echo": True, "suffix": "x"}, "echo"), ({"stop": [["x"]]}, "stop[0]"), ({"stop": ["a", 1]}, "stop[1]"), ({"logit_bias": {"x": 1}}, "logit_bias"), ({"frobnicate": 1}, "frobnicate"),
])
async def test_refused_by_name(serve, extra, param):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"


async def test_vllms_sampling_fields_reach_the_request_as_on_chat(serve, demo_tok):
    """``top_k``, ``min_p`` and ``repetition_penalty`` (vLLM's, taken on Chat Completions) are taken here too, as
    clients of local servers' text completion send them, not refused as unknown; out of range, refused by name."""
    from backends import Asked

    s = await serve(backend=Asked([ScriptEntry("ok")] * 2, demo_tok, model_id=MODEL))
    sampling = {"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1}
    r = await client(s).completions.create(model=MODEL, prompt="hi", extra_body=sampling)
    assert Completion.model_validate(r.model_dump()).choices[0].text == "ok"
    req = s.engine.backend.requests[-1]
    assert (req.top_k, req.min_p, req.repetition_penalty) == (40, 0.05, 1.1)
    async with httpx.AsyncClient() as c:
        for field, bad in (("top_k", -1), ("min_p", 1.5), ("repetition_penalty", -0.5)):
            r = await c.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "hi", field: bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


async def test_a_completion_shares_the_prompt_cache_and_usage_accounting(serve, demo_tok):
    from tinytitan.engine.cache.memory import PromptCache

    backend = ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=MODEL, prompt_cache=PromptCache(1 << 20))
    s = await serve(backend=backend)
    c = client(s)
    prompt = "a long shared prefix that the second request repeats word for word, then more"
    await c.completions.create(model=MODEL, prompt=prompt)
    again = await c.completions.create(model=MODEL, prompt=prompt + " and a new ending")
    assert again.usage.prompt_tokens_details.cached_tokens > 0


async def test_the_demo_model_completes_a_raw_prompt(serve, demo_backend):
    s = await serve(backend=demo_backend)
    c = client(s)
    r = await c.completions.create(model=demo_backend.model_id, prompt="def main():\n", max_tokens=6, seed=1,
                                   temperature=0)
    again = await c.completions.create(model=demo_backend.model_id, prompt="def main():\n", max_tokens=6, seed=1,
                                       temperature=0, stream=True)
    streamed = "".join([ch.text async for chunk in again for ch in chunk.choices])
    assert 0 < r.usage.completion_tokens <= 6 and streamed == r.choices[0].text
    assert r.usage.prompt_tokens == len(demo_backend.tokenizer.encode("def main():\n", add_special_tokens=False))


async def test_a_prompt_over_the_context_window_names_prompt(serve, demo_tok):
    s = await serve(backend=ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=MODEL, context_window=32))
    with pytest.raises(openai.BadRequestError) as err:
        await client(s).completions.create(model=MODEL, prompt="word " * 100)
    assert err.value.body["param"] == "prompt" and err.value.body["code"] == "context_length_exceeded"


async def test_an_empty_prompt_is_refused_by_name_not_a_server_error(serve, demo_backend):
    s = await serve(backend=demo_backend)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as err:
            await client(s).completions.create(model=demo_backend.model_id, prompt="", max_tokens=3, stream=stream)
        assert err.value.body["param"] == "prompt" and "empty" in err.value.body["message"]


@pytest.mark.parametrize("prompt", ["", "word " * 100])
async def test_the_log_line_names_the_prompt_as_the_answer_does(serve, demo_tok, caplog, prompt):
    from observe_helpers import eventually
    caplog.set_level(logging.INFO, logger="tinytitan.requests")
    s = await serve(backend=ScriptedBackend([ScriptEntry("ok")], demo_tok, model_id=MODEL, context_window=32))
    with pytest.raises(openai.BadRequestError) as err:
        await client(s).completions.create(model=MODEL, prompt=prompt)
    assert err.value.body["param"] == "prompt"

    async def logged():
        return [r.getMessage() for r in caplog.records if r.name == "tinytitan.requests"
                and "/v1/completions" in r.getMessage()]

    (line,) = await eventually(logged)
    assert line.endswith("param=prompt") or " param=prompt " in line, line


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
])
async def test_include_usage_must_be_a_boolean(serve, path, body):
    s = await serve(["never"])
    async with httpx.AsyncClient() as c:
        r = await c.post(s.url(path), json={"model": MODEL, "stream": True,
                                            "stream_options": {"include_usage": "yes"}, **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "stream_options.include_usage"
    assert r.json()["error"]["code"] == "invalid_type"


class WillNotLoad(ScriptedBackend):
    """A model whose weights cannot be made resident: the failure comes after the stream opened."""

    loaded = False

    def ensure_loaded(self):
        from tinytitan.errors import invalid

        raise invalid("the model's weights cannot be read", param="model")


async def test_an_error_inside_the_stream_uses_the_public_error_type(serve, demo_tok):
    """``spec/openai_completions.yaml``'s error event words the error as the API does (``invalid_request_error``),
    never with the server's internal kind (``invalid_request``)."""
    from sse import parse_sse

    s = await serve(backend=WillNotLoad([ScriptEntry("never")], demo_tok, model_id=MODEL))
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(s.url("/v1/completions"), json={"model": MODEL, "prompt": "Once", "stream": True})
    assert r.status_code == 200
    events = [data for _, data in parse_sse(r.text)]
    assert events[-1] == "[DONE]"
    assert events[-2] == {"error": {"message": "the model's weights cannot be read", "type": "invalid_request_error",
                                    "param": None, "code": None}}  # no code of its own, as a 400 has none

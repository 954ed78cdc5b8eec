"""CodeLlama's ``<FILL_ME>`` in a prompt is its characters, through every route that encodes a prompt's text.

transformers' CodeLlamaTokenizer reads a text holding its ``fill_token`` as an infill prompt: a chat message holding
it once lost those characters and left the infill normalizer on the tokenizer every request shares; holding it
twice, the request failed (a 500). Nor may it read as the special token the class adds for it: that id lies past
the model's embedding (CodeLlama's vocabulary has no ``<FILL_ME>``). The template's own special tokens still read
as tokens."""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion

from fim_helpers import MODEL, KeepingIds, codellama_tokenizer
from tinytitan.engine.backends.scripted import ScriptEntry
from tinytitan.engine.prompt.tokenizer_facts import ids_of
from tinytitan.engine.summarise import Summariser

TEXTS = {"one": "x = 1  # <FILL_ME>", "two": "a <FILL_ME> b <FILL_ME> c", "between": 'a = "<FILL_ME>" + b'}


def codellama():
    tok = codellama_tokenizer()
    tok.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return tok


def check_read_as_characters(tok, ids: list[int], text: str, raw: bool = False) -> None:
    """``ids`` are the BOS and ``text``, as the same tokenizer without a fill token reads them: the template's
    ``<s>`` before the text; a raw prompt's BOS before the text encoded alone."""
    unfilled = codellama_tokenizer(fill_token=None)
    expected = [tok.bos_token_id] + unfilled.encode(text, add_special_tokens=False) if raw else \
        unfilled.encode("<s>" + text, add_special_tokens=False)
    assert ids == expected and ids[0] == tok.bos_token_id
    assert tok.convert_tokens_to_ids("<FILL_ME>") not in ids
    # (a text encoded alone opens with the ``▁`` of a word's start: after ``<s>``, a space)
    assert tok.backend_tokenizer.decode(ids, skip_special_tokens=False) == ("<s> " if raw else "<s>") + text


async def served(serve, tok):
    backend = KeepingIds([ScriptEntry("x")] * 4, tok, model_id=MODEL)
    return backend, await serve(backend=backend)


@pytest.mark.parametrize("text", list(TEXTS))
@pytest.mark.parametrize("client", ["chat_completions", "anthropic", "ollama"])
async def test_a_chat_message_spelling_the_fill_token_is_its_characters(serve, client, text):
    tok = codellama()
    before = tok.backend_tokenizer.to_str()
    backend, s = await served(serve, tok)
    content = TEXTS[text]
    messages = [{"role": "user", "content": content}]
    if client == "chat_completions":
        c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
        r = await c.chat.completions.create(model=MODEL, messages=messages, max_tokens=5)
        ChatCompletion.model_validate(r.model_dump())
        counted = r.usage.prompt_tokens
    elif client == "anthropic":
        c = anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0)
        r = await c.messages.create(model=MODEL, messages=messages, max_tokens=5)
        counted = r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
    else:
        r = await ollama.AsyncClient(host=s.base).chat(model=MODEL, messages=messages)
        counted = r.prompt_eval_count
    assert len(backend.ids) == 1 and counted == len(backend.ids[0])
    check_read_as_characters(tok, backend.ids[0], content)
    assert tok.backend_tokenizer.to_str() == before  # the shared tokenizer's normalizer and post-processor


@pytest.mark.parametrize("text", list(TEXTS))
async def test_a_raw_prompt_spelling_the_fill_token_is_its_characters(serve, text):
    """A legacy completion prompt without a suffix: its characters too (a suffix is how a client asks to fill)."""
    tok = codellama()
    backend, s = await served(serve, tok)
    c = openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)
    r = await c.completions.create(model=MODEL, prompt=TEXTS[text], max_tokens=5)
    Completion.model_validate(r.model_dump())
    check_read_as_characters(tok, backend.ids[0], TEXTS[text], raw=True)
    assert r.usage.prompt_tokens == len(backend.ids[0])


async def test_count_tokens_counts_the_fill_token_as_characters(serve):
    tok = codellama()
    before = tok.backend_tokenizer.to_str()
    backend, s = await served(serve, tok)
    c = anthropic.AsyncAnthropic(base_url=s.base, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": TEXTS["two"]}]
    counted = await c.messages.count_tokens(model=MODEL, messages=messages)
    made = await c.messages.create(model=MODEL, messages=messages, max_tokens=5)
    assert counted.input_tokens == made.usage.input_tokens == len(backend.ids[0])
    check_read_as_characters(tok, backend.ids[0], TEXTS["two"])
    assert tok.backend_tokenizer.to_str() == before


def test_a_text_without_the_fill_token_is_the_tokenizers_own_encoding():
    """Only a text spelling the fill token leaves the tokenizer's ``encode``; the template's markers are tokens."""
    tok = codellama()
    for text in ("a = b  # no fill here", "<s>x ▁<PRE>y"):
        assert ids_of(tok)(text) == tok.encode(text, add_special_tokens=False)
    filled = ids_of(tok)("<s>x ▁<PRE>y <FILL_ME>")
    assert filled[0] == tok.bos_token_id and tok.convert_tokens_to_ids("▁<PRE>") in filled


class OneModel:
    """The part of an engine a Summariser reads: one model."""

    def __init__(self, backend):
        self.backend = backend

    def resolve(self, model: str):
        return (model,)

    def backend_for(self, model: str):
        return self.backend


def test_a_transcript_spelling_the_fill_token_is_counted_and_trimmed_as_characters():
    """A compaction's summary counts and trims the transcript by its tokens: a conversation quoting ``<FILL_ME>``
    twice failed there too."""
    tok = codellama()
    summary = Summariser(OneModel(KeepingIds([ScriptEntry("x")], tok, model_id=MODEL)), MODEL, 4)
    text = TEXTS["two"]
    assert summary.count(text) == len(codellama_tokenizer(fill_token=None).encode(text, add_special_tokens=False))
    kept = summary.extractive(text)
    assert kept and text.endswith(kept) and summary.count(kept) <= 4

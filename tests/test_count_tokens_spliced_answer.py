"""count_tokens and /v1/responses/input_tokens count the prompt as the decoder reads it: where the prompt cache
splices a generated answer's own ids into the next prompt (prompt/splice.py), the count is of those ids, as the
next turn's usage is — not of the answer's text tokenized again (which a model's own ids rarely are)."""

from __future__ import annotations

from conftest import entries
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptRun
from tinytitan.engine.cache.memory import PromptCache

from anthropic_util import MODEL, post

ANSWER = "The parser reads each line twice."


class CharByChar(ScriptedBackend):
    """A model that generated its answer one character per token (as sampled ids often are: not the
    tokenizer's own merges of the text)."""

    def start(self, prepared, model, reuse=True, handed=None):
        entry = self.next_entry()
        ids = [i for ch in entry.output for i in self.tokenizer.encode(ch, add_special_tokens=False)]
        cached = self.prompt_cache.fetch(prepared.tokens)[1]
        self.prompt_cache.store(list(prepared.tokens) + ids[: prepared.max_tokens], None, facts=prepared.facts())
        return ScriptRun(self, entry, ids, prepared), cached, cached


def backend(demo_tok):
    return CharByChar(entries([ANSWER, "Fixed."]), demo_tok, model_id=MODEL, prompt_cache=PromptCache(1 << 30))


async def test_count_tokens_counts_the_spliced_answer(serve, demo_tok):
    s = await serve(backend=backend(demo_tok))
    msgs = [{"role": "user", "content": "Why is the parser slow?"}]
    first = (await post(s, {"model": MODEL, "max_tokens": 100, "messages": msgs})).json()
    assert first["content"][0]["text"] == ANSWER
    payload = {"model": MODEL, "messages": msgs + [{"role": "assistant", "content": ANSWER},
                                                   {"role": "user", "content": "Fix it."}]}
    counted = (await post(s, payload, "/v1/messages/count_tokens")).json()["input_tokens"]
    u = (await post(s, {**payload, "max_tokens": 100})).json()["usage"]
    assert u["cache_read_input_tokens"] > 0
    assert counted == u["input_tokens"] + u["cache_read_input_tokens"], (counted, u)


async def test_responses_input_tokens_counts_the_spliced_answer(serve, demo_tok):
    import httpx

    s = await serve(backend=backend(demo_tok))
    async with httpx.AsyncClient(timeout=30) as c:
        first = (await c.post(s.url("/v1/responses"), json={"model": MODEL, "input": "Why is the parser slow?"})).json()
        body = {"model": MODEL, "input": "Fix it.", "previous_response_id": first["id"]}
        counted = (await c.post(s.url("/v1/responses/input_tokens"), json=body)).json()["input_tokens"]
        u = (await c.post(s.url("/v1/responses"), json=body)).json()["usage"]
    assert u["input_tokens_details"]["cached_tokens"] > 0
    assert counted == u["input_tokens"], (counted, u)

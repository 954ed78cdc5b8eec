"""What the observation tests share: the scripted model's name, an OpenAI client, waiting for a request's record,
and /metrics read with prometheus_client's own parser."""

from __future__ import annotations

import httpx
import openai
import trio
from prometheus_client.parser import text_string_to_metric_families

MODEL = "tinytitan-scripted"


ANSWER = "Paris is the capital of France, and it is lovely in spring."


def client(s) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url("/v1"), api_key="anything", max_retries=0)


async def eventually(check, timeout: float = 20.0):
    """The record of a request is final once its response is fully sent: a moment after the client has it, or,
    for a client that hung up, once the server has seen it go; on a busy machine either can take seconds."""
    deadline = trio.current_time() + timeout
    while True:
        result = await check()
        if result or trio.current_time() > deadline:
            return result
        await trio.sleep(0.02)


async def scrape(s) -> dict[tuple[str, tuple], float]:
    async with httpx.AsyncClient() as c:
        r = await c.get(s.url("/metrics"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(r.text) for sample in family.samples}


async def has(s, key) -> bool:
    return key in await scrape(s)


def tokens(samples, kind: str) -> float:
    return samples.get(("tinytitan_tokens_total", (("kind", kind), ("model", MODEL))), 0.0)


def counting(decoded: list[int], entries, tokenizer):
    """The scripted backend, appending to ``decoded`` how many tokens each generation decoded once it ends (cut
    short or not)."""
    from tinytitan.engine.backends.scripted import ScriptedBackend

    class Counting(ScriptedBackend):
        def decode(self, prepared, loop, should_stop):
            try:
                super().decode(prepared, loop, should_stop)
            finally:
                decoded.append(loop.completion_tokens)

    return Counting(entries, tokenizer, model_id=MODEL)

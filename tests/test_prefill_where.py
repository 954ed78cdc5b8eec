"""A prefill's refusals name the message as the client sent it."""

from __future__ import annotations

import httpx

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry

MODEL = "tinytitan-scripted"
ASK = {"role": "user", "content": "Count to five."}


async def test_a_template_refusal_names_the_clients_own_message(serve):
    """The 400 for a template that cannot continue the prefill names the prefill as the client sent it: with a
    top-level ``system`` (placed first among the request's messages) or two user messages merged into one turn,
    the prefill is still the client's messages[1] / messages[2]."""
    from tinytitan.engine.backends.scripted import demo_tokenizer

    tok = demo_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    s = await serve(backend=Recording([ScriptEntry("x")], tok, model_id=MODEL))
    prefill = {"role": "assistant", "content": "One, two,"}
    async with httpx.AsyncClient(timeout=30) as c:
        for body, where in (({"system": "Be brief.", "messages": [ASK, prefill]}, "messages[1]"),
                            ({"messages": [ASK, ASK, prefill]}, "messages[2]")):
            r = await c.post(s.url("/v1/messages"), json={"model": MODEL, "max_tokens": 9, **body},
                             headers={"anthropic-version": "2023-06-01", "x-api-key": "x"})
            assert r.status_code == 400, r.text
            assert f"final assistant message ({where})" in r.json()["error"]["message"], r.text

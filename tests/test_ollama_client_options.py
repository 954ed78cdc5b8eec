"""Every option the official client's Options type declares is taken."""

from __future__ import annotations

import ollama
import pytest

MODEL = "tinytitan-scripted"


@pytest.mark.parametrize("option", ["f16_kv", "logits_all", "embedding_only"])
async def test_every_option_of_the_official_clients_options_type_is_taken(serve, option):
    """``ollama.Options`` declares these runner options beside ``low_vram``, ``vocab_only`` … (which are taken);
    Ollama reads none of them and answers (an unknown option is a logged warning there, never an error)."""
    s = await serve(["Hello."])
    r = await ollama.AsyncClient(host=s.base).chat(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                   options=ollama.Options(**{option: True}))
    assert r.message.content == "Hello."

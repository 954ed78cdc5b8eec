"""Adversarial raw model outputs through all four protocols, streaming and not: invariants, not exact bytes.

Each case is a raw model output (random fragments: reasoning and tool-call markers, whole, broken and
truncated call JSON, braces, quotes, backslashes, emoji / CJK / combining marks, whitespace, plain words),
with or without a declared function tool ``f``, sometimes an output cap, sometimes a client stop string.
One scripted server answers every request of a chunk of cases; each case is asked eight times — Chat
Completions, Responses, Messages and Ollama's /api/chat, each non-streaming and streaming — and these must hold:

- HTTP 200; each stream well-formed for its protocol (Chat: chunks, one finish, then ``[DONE]``; Responses:
  ``sequence_number`` 0, 1, 2 … from ``response.created`` to ``response.completed`` / ``.incomplete``, items
  opened in order, each closed, every ``.done`` equal to its deltas; Messages: ``message_start`` …
  ``message_stop``, content blocks opened in index order, one at a time, each closed; Ollama: JSON lines,
  every one ``done: false`` but the last);
- the non-stream answer is what the stream describes (text, reasoning, tool names and arguments, finish /
  stop reason, output tokens);
- the protocols tell the same story (same items in the same order, same finish, same token counts;
  Messages' ``input`` and Ollama's ``arguments`` are the arguments' JSON object, ``{}`` for anything else);
- the finish reason and output tokens follow from the token count, the cap and the calls;
- a completed (not cut) call's arguments are a JSON object;
- every plain word of the output that survived the cap and the stop string appears in text, reasoning or
  arguments, and no word comes back more often than the model wrote it;
- the engine is idle afterwards (``running == waiting == 0``).

Deterministic: ``TINYTITAN_FUZZ_SEED`` (default 20251130) and ``TINYTITAN_FUZZ_CASES`` (default 128) pick the
cases. A failure lists each bad case with its raw output and request, ready to paste into a test.
The cases, the readers of each protocol's answer and the invariants are tests/output_fuzz_cases.py,
output_fuzz_readers.py and output_fuzz_invariants.py. Bugs found this way are pinned by minimal reproductions
in tests/test_malformed_call_outputs.py. Arguments a model writes as invalid JSON (or JSON that is not an
object) are kept out of the random cases (``PASSED_THROUGH``), whose invariants assume JSON objects, and are
tested there.
"""

from __future__ import annotations

import pytest

from output_fuzz_cases import SEED, all_cases, words_are_distinct
from output_fuzz_invariants import run_cases

CHUNKS = 4  # one server per chunk (pytest shows which chunk failed; the message lists the cases)


def test_the_words_are_distinct():
    assert words_are_distinct()


@pytest.mark.parametrize("chunk", range(CHUNKS))
async def test_fuzz_outputs(serve, demo_tok, chunk):
    cases = all_cases(demo_tok)[chunk::CHUNKS]
    failures = await run_cases(serve, demo_tok, cases)
    assert not failures, f"{len(failures)} of {len(cases)} cases broke an invariant (seed {SEED}):\n" + \
        "\n".join(failures)

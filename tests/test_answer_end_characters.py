"""The last characters of an answer, as the model wrote them: none lost, none made up, on every protocol.

- Text the detokenizer still held when the model ended its turn is sent. The row read ``last_segment`` twice
  after the final flush, once to see whether there was anything and once to send it; the property moves its
  offset on, so the held text was lost. A detokenizer holds back what ends in U+FFFD (it may be a character
  begun), so an answer ending in a U+FFFD the model wrote whole lost it on the chat protocols, while legacy
  Completions (read from the ids) kept it.
"""

from __future__ import annotations

import httpx

from test_foldfuzz import AH, FOLD, PROTOS, body
from test_fuzz_outputs import Case

async def _answers(serve, output: str, cap: int | None) -> dict:
    s = await serve([output] * (2 * len(PROTOS)))
    case = Case(0, output, False, cap, [])
    out = {}
    async with httpx.AsyncClient(timeout=60) as client:
        for proto in PROTOS:
            folds = []
            for stream in (False, True):
                path, request = body(proto, "tinytitan-scripted", case, stream)
                r = await client.post(s.url(path), json=request, headers=AH if proto == "messages" else {})
                assert r.status_code == 200, r.text
                folds.append(FOLD[proto][stream](r.text))
            ns, st = folds
            assert (ns.text, ns.finish, ns.tokens) == (st.text, st.finish, st.tokens), (proto, ns, st)
            out[proto] = ns
    return out


async def test_a_replacement_character_ending_the_answer_is_sent(serve):
    answers = await _answers(serve, "Odd \ufffd", None)
    assert {proto: told.text for proto, told in answers.items()} == dict.fromkeys(answers, "Odd \ufffd")

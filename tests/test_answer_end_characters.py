"""The last characters of an answer, as the model wrote them: none lost, none made up, on every protocol.

- Text the detokenizer still held when the model ended its turn is sent. The row read ``last_segment`` twice
  after the final flush, once to see whether there was anything and once to send it; the property moves its
  offset on, so the held text was lost. A detokenizer holds back what ends in U+FFFD (it may be a character
  begun), so an answer ending in a U+FFFD the model wrote whole lost it on the chat protocols, while legacy
  Completions (read from the ids) kept it.
- An answer the output cap cuts inside a multi-byte character ends before that character. The cap counts
  tokens, and a byte-level tokenizer spends several on one character (🙂 is four tokens of the demo
  tokenizer): cut after the first of them, the answer ended in U+FFFD, a character the model never wrote (the
  detokenizer's final flush replaces the bytes it still held). OpenAI's APIs never send half a character; the
  incomplete bytes are left out, as a stream that stopped one token earlier would have. A U+FFFD the model
  wrote whole is its text and stays.

The stream and the non-stream body agree on each (the fold of the same events).
"""

from __future__ import annotations

import httpx
import pytest

from output_fuzz_cases import Case
from protocol_folds import AH, FOLD, PROTOS, body

SMILE = "Smile 🙂"


def _ids(demo_tok, text: str) -> list[int]:
    return demo_tok.encode(text, add_special_tokens=False)

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


@pytest.mark.parametrize("inside", [1, 2, 3])
async def test_a_cut_inside_a_character_leaves_it_out(serve, demo_tok, inside):
    ids = _ids(demo_tok, SMILE)
    whole = len(_ids(demo_tok, "Smile "))
    assert len(ids) - whole == 4  # the emoji is four byte tokens: the cap can fall after any of them
    answers = await _answers(serve, SMILE, whole + inside)
    for proto, told in answers.items():
        assert "\ufffd" not in told.text, (proto, told.text)
        assert told.text == ("Smile " if proto == "completions" else "Smile"), (proto, told.text)
        assert told.tokens == whole + inside, proto  # the tokens were generated: they are counted
    assert answers["chat"].finish == "length"


async def test_a_cut_after_a_whole_character_keeps_it(serve, demo_tok):
    answers = await _answers(serve, SMILE, len(_ids(demo_tok, SMILE)))
    assert {told.text for told in answers.values()} == {SMILE}


@pytest.mark.parametrize("cut", [0, 2])
async def test_a_replacement_character_the_model_wrote_stays(serve, demo_tok, cut):
    """U+FFFD written whole, last before the cap or the end of the answer (``cut`` 0), or before a character
    the cap cut (2 of the emoji's 4 tokens): it is the model's text."""
    output = "Odd \ufffd" + ("🙂" if cut else "")
    cap = len(_ids(demo_tok, output)) - cut
    for c in (cap, None) if not cut else (cap,):
        answers = await _answers(serve, output, c)
        assert {told.text for told in answers.values()} == {"Odd \ufffd"}, (c, answers)

"""The output fuzz's invariants (listed in tests/test_fuzz_outputs.py): one case asked of every protocol,
streaming and not, and what must hold of the eight answers."""

from __future__ import annotations

import json
import re
import unicodedata

import httpx
import trio

from output_fuzz_cases import PROTOCOLS, WORDS, Case, ask
from output_fuzz_readers import (Bad, Told, chat_nonstream, chat_stream, check, messages_nonstream, messages_stream,
                                 ollama_nonstream, ollama_stream, responses_items, responses_stream, tool_input)


def anonymous(resp: dict) -> dict:
    """A Responses object without what differs between two runs of one answer (ids, times)."""
    out = {k: v for k, v in resp.items() if k not in ("id", "created_at", "completed_at")}
    out["output"] = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in resp["output"]]
    return out


def strip_complete(told: Told) -> list:
    return [i[:3] if i[0] == "call" else i for i in told.items]


def same(a: Told, b: Told, what: str, tokens: bool = True) -> None:
    check(strip_complete(a) == strip_complete(b), f"{what}: items differ\n  {strip_complete(a)}\n  {strip_complete(b)}")
    check(a.finish == b.finish, f"{what}: finish {a.finish!r} vs {b.finish!r}")
    check(a.stop_sequence == b.stop_sequence, f"{what}: stop_sequence {a.stop_sequence!r} vs {b.stop_sequence!r}")
    if tokens:
        check(a.output_tokens == b.output_tokens, f"{what}: output tokens {a.output_tokens} vs {b.output_tokens}")
        check(a.reasoning_tokens == b.reasoning_tokens, f"{what}: reasoning tokens")


FINISH = {"end_turn": ("stop", "completed"), "max_tokens": ("length", "incomplete"),
          "stop_sequence": ("stop", "completed"), "tool_use": ("tool_calls", "completed")}


def count_word(word: str, text: str, bounded: bool = False) -> int:
    """Occurrences as a substring (no word is part of another, nor of the markup): Chat joins the text runs
    around a reasoning block with no separator, so word boundaries are not kept there. ``bounded``:
    whole ASCII words only (joined runs can spell a word across the seam: quebec + hotel holds echo)."""
    word = unicodedata.normalize("NFC", word)  # the demo tokenizer normalises: e + U+0301 reads back as é
    if bounded and word.isascii():
        return len(re.findall(rf"(?<![A-Za-z]){re.escape(word)}(?![A-Za-z])", text))
    return text.count(word)


def told_text(t: Told) -> str:
    """Everything an answer carries, for counting words: text, reasoning, names, arguments (as written)."""
    parts = []
    for i in t.items:
        parts.append(i[1])
        if i[0] == "call":
            parts.append(i[2] if isinstance(i[2], str) else json.dumps(i[2], ensure_ascii=False))
    return "\n".join(parts)


def check_case(case: Case, tok, answers: dict) -> None:
    chat_ns, chat_s = answers["chat"]
    (resp_ns, resp_object), (resp_s, resp_final) = answers["responses"]
    msg_ns, msg_s = answers["messages"]
    oll_ns, oll_s = answers["ollama"]

    # the non-stream answer is what the stream describes
    same(chat_ns, chat_s, "chat non-stream vs stream")
    same(resp_ns, resp_s, "responses non-stream vs stream")
    if (msg_ns.finish == "max_tokens" and msg_s.items and msg_s.items[-1][0] == "call"
            and msg_ns.items and msg_ns.items[-1][:3] == msg_s.items[-1][:2] + ({},)):
        # a call the cap cut: the SDK reads the stream's partial JSON (a partial object), the fold sends {}
        # (test_known_messages_cut_call_stream_and_fold_disagree); the rest must agree
        msg_s = Told(msg_s.items[:-1] + [msg_ns.items[-1]], msg_s.finish, msg_s.stop_sequence, msg_s.output_tokens)
    same(msg_ns, msg_s, "messages non-stream vs stream")
    same(oll_ns, oll_s, "ollama non-stream vs stream")
    check(anonymous(resp_object) == anonymous(resp_final), "responses: the non-stream object is not the stream's "
                                                           f"final one\n  {resp_object}\n  {resp_final}")

    ids = tok.encode(case.output, add_special_tokens=False)
    generated = tok.decode(ids)  # what the model wrote, as its tokens read back (NFC here)
    n_expected = len(ids) if case.cap is None else min(case.cap, len(ids))
    # the cap reached on the script's last token cuts it too: the end of turn would have been the next token, as
    # for a model whose max_tokens runs out just before its end-of-sequence (every row ends at its cap, Row.accept)
    cut = case.cap is not None and case.cap <= len(ids)
    stopped = msg_ns.finish == "stop_sequence"
    # a stop string matched after whole calls ends a turn that called tools: tool_use, no stop_sequence
    after_calls = bool(case.stop) and msg_ns.finish == "tool_use"

    # the three protocols tell one story (Responses takes no stop strings: compared only without them)
    check(chat_ns.finish == FINISH[msg_ns.finish][0], f"chat finish {chat_ns.finish} vs messages {msg_ns.finish}")
    check(chat_ns.output_tokens == msg_ns.output_tokens, "chat vs messages output tokens")
    # Chat folds text and reasoning into one string each; its calls keep their order
    expect_chat = Told()
    if msg_ns.texts("reasoning"):
        expect_chat.items.append(("reasoning", msg_ns.texts("reasoning")))
    if msg_ns.texts("text"):
        expect_chat.items.append(("text", msg_ns.one_string()))
    check([i for i in chat_ns.items if i[0] != "call"] == expect_chat.items,
          f"chat vs messages text/reasoning\n  {chat_ns.items}\n  {msg_ns.items}")
    chat_calls = [(c[1], tool_input(c[2]) or {}) for c in chat_ns.calls()]
    msg_calls = [(c[1], c[2]) for c in msg_ns.calls()]
    check(chat_calls == msg_calls, f"chat vs messages calls\n  {chat_calls}\n  {msg_calls}")
    # Ollama folds like Chat, sends arguments as Messages does, and says only stop or length
    check([i for i in oll_ns.items if i[0] != "call"] == expect_chat.items,
          f"ollama vs messages text/reasoning\n  {oll_ns.items}\n  {msg_ns.items}")
    check([(c[1], c[2]) for c in oll_ns.calls()] == msg_calls, f"ollama vs messages calls {oll_ns.calls()}")
    check(oll_ns.finish == ("length" if msg_ns.finish == "max_tokens" else "stop"), f"ollama {oll_ns.finish}")
    check(oll_ns.output_tokens == msg_ns.output_tokens, "ollama vs messages output tokens")
    check(resp_ns.finish == ("incomplete" if cut else "completed"), f"responses {resp_ns.finish}, cut={cut}")
    check(resp_ns.output_tokens == n_expected, f"responses output tokens {resp_ns.output_tokens}, expected "
                                               f"{n_expected}")
    if not case.stop:
        check(resp_ns.finish == FINISH[msg_ns.finish][1], f"responses {resp_ns.finish} vs messages {msg_ns.finish}")
        check(resp_ns.output_tokens == msg_ns.output_tokens, "responses vs messages output tokens")
        check(resp_ns.reasoning_tokens == chat_ns.reasoning_tokens, "responses vs chat reasoning tokens")
        kinds = [i[0] for i in resp_ns.items]
        check(kinds == [i[0] for i in msg_ns.items], f"responses vs messages item order\n  {resp_ns.items}\n  "
                                                     f"{msg_ns.items}")
        for r, m in zip(resp_ns.items, msg_ns.items):
            if r[0] == "call":
                check(r[1] == m[1] and (tool_input(r[2]) or {}) == m[2], f"responses vs messages call {r} {m}")
            else:
                check(r == m, f"responses vs messages {r[0]}: {r[1]!r} vs {m[1]!r}")
        check([c[1:3] for c in resp_ns.calls()] == [c[1:3] for c in chat_ns.calls()],
              f"responses vs chat calls {resp_ns.calls()} {chat_ns.calls()}")

    # finish reason and token count follow from the output, the cap and the calls
    if after_calls:
        check(msg_ns.stop_sequence is None, "stop_sequence set on a tool turn")
        check(msg_ns.output_tokens <= n_expected, "more tokens than the output has")
    elif not stopped:
        check(msg_ns.output_tokens == n_expected, f"output tokens {msg_ns.output_tokens}, expected {n_expected}")
        want = "max_tokens" if cut else "tool_use" if msg_ns.calls() else "end_turn"
        check(msg_ns.finish == want, f"stop_reason {msg_ns.finish}, expected {want}")
        check(msg_ns.stop_sequence is None, "stop_sequence set without a stop")
    else:
        check(msg_ns.stop_sequence in case.stop, f"stop_sequence {msg_ns.stop_sequence!r} not sent")
        check(msg_ns.output_tokens <= n_expected, "more tokens than the output has")
    check(chat_ns.reasoning_tokens <= chat_ns.output_tokens, "reasoning tokens over output tokens")
    for told in (chat_ns, resp_ns, msg_ns):
        for c in told.calls():
            check(isinstance(c[1], str) and c[1], f"a call without a name: {c}")
    if not case.calls_allowed:
        check(not chat_ns.calls() and not msg_ns.calls() and not resp_ns.calls(), "a call where none is allowed")

    # completed calls carry a JSON object (Chat cannot say a call is incomplete: Responses says it for both)
    resp_complete = [c[3] for c in resp_ns.calls()]
    for proto, told in (("chat", chat_ns), ("responses", resp_ns)):
        calls = told.calls()
        for k, c in enumerate(calls):
            complete = resp_complete[k] if k < len(resp_complete) and resp_complete[k] is not None else \
                not (cut and k == len(calls) - 1)
            if complete:
                try:
                    value = json.loads(c[2])
                except ValueError:
                    value = None
                check(isinstance(value, dict), f"{proto}: completed call {c[1]!r} arguments not a JSON object: "
                                               f"{c[2]!r}")
    for k, c in enumerate(resp_ns.items):  # the cap cuts only the last item; else markup ended in the arguments
        if c[0] == "call" and c[3] is False:
            check((cut and k == len(resp_ns.items) - 1) or not isinstance(tool_input(c[2]), dict),
                  f"responses: an incomplete call {c} (cut={cut}, item {k})")

    # words: what survived the cap and the stop string is all there, nothing more often than written
    kept = tok.decode(ids[: n_expected]) if cut else generated
    survived = kept  # Responses takes no stop strings: all it keeps is what the cap left
    if stopped:
        at = kept.find(msg_ns.stop_sequence)
        check(at >= 0, f"stopped at {msg_ns.stop_sequence!r}, which the output does not hold")
        survived = kept[: at]
    elif after_calls:  # which stop string matched is not told: the earliest any could have (asks no more)
        survived = kept[: min([kept.find(x) for x in case.stop if x in kept], default=len(kept))]
    for proto, told in (("chat", chat_ns), ("messages", msg_ns), ("responses", resp_ns), ("ollama", oll_ns)):
        region = kept if proto == "responses" else survived
        have = told_text(told)
        for w in WORDS:
            raw_n = count_word(w, generated)
            got = count_word(w, have, bounded=True)
            check(got <= raw_n, f"{proto}: {w!r} comes back {got} times, written {raw_n}")
            if proto in ("messages", "ollama"):
                continue  # arguments that are not an object become {} there (checked against chat above)
            need, got = count_word(w, region), count_word(w, have)
            check(got >= need, f"{proto}: {w!r} lost: {got} of {need} in {told.items}")


async def answer(client: httpx.AsyncClient, s, case: Case) -> dict:
    """The eight answers to one case (request k of the server's script must be this case's output)."""
    answers: dict = {}
    for proto in PROTOCOLS:
        pair = []
        for stream in (False, True):
            r = await ask(client, s, proto, case, stream)
            check(r.status_code == 200, f"{proto} stream={stream}: HTTP {r.status_code} {r.text[:300]}")
            if stream:
                check(r.headers["content-type"].startswith("application/x-ndjson" if proto == "ollama" else
                                                           "text/event-stream"), "stream content-type")
                pair.append({"chat": chat_stream, "responses": responses_stream, "messages": messages_stream,
                             "ollama": ollama_stream}[proto](r.text))
            else:
                d = r.json()
                pair.append((responses_items(d), d) if proto == "responses" else
                            {"chat": chat_nonstream, "messages": messages_nonstream,
                             "ollama": ollama_nonstream}[proto](d))
        answers[proto] = pair
    return answers


async def run_cases(serve, tok, cases: list[Case]) -> list[str]:
    s = await serve([c.output for c in cases for _ in range(2 * len(PROTOCOLS))])
    failures = []
    async with httpx.AsyncClient(timeout=30) as client:
        for case in cases:
            try:
                check_case(case, tok, await answer(client, s, case))
            except Bad as exc:
                failures.append(f"{case}\n    {exc}")
            except Exception as exc:  # a KeyError in a malformed answer is a finding too
                failures.append(f"{case}\n    {type(exc).__name__}: {exc}")
            try:
                with trio.fail_after(20):  # (a request's place is given back once its answer is sent)
                    while s.engine.running or s.engine.waiting:
                        await trio.sleep(0.01)
            except trio.TooSlowError:
                failures.append(f"{case}\n    engine not idle after 20 s: running={s.engine.running} "
                                f"waiting={s.engine.waiting}")
    return failures

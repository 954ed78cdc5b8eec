"""The answer's own ids: a prompt that renders a cached answer's text at the same place reuses the ids the model
generated there, and still decodes to exactly the rendered prompt."""

from __future__ import annotations

import numpy as np

from tinytitan.chat_request import ChatRequest, Message
from tinytitan.engine.cache.prefix_index import common_prefix
from tinytitan.engine.cache.memory import PromptCache
from tinytitan.engine.prompt.splice import Span, splice
from prompt_cache_helpers import spelled_out_ids


def _req(msgs, **kw):
    return ChatRequest(model="tinytitan-demo", messages=tuple(Message(r, c) for r, c in msgs), temperature=0, **kw)


def test_a_generated_answer_is_spliced_and_the_prompt_still_decodes_to_the_rendered_text(demo_backend):
    tok = demo_backend.tokenizer
    demo_backend.prompt_cache.clear()
    turn1 = [("system", "You write code."), ("user", "Write a function that parses a header.")]
    p1 = demo_backend.prepare(_req(turn1))
    answer = "def parse(h):\n    return h.split(':', 1)"
    generated = spelled_out_ids(tok, answer) + tok.encode("<|im_end|>", add_special_tokens=False)
    demo_backend.prompt_cache.store(p1.tokens + generated, None)

    turn2 = turn1 + [("assistant", answer), ("user", "Now test it.")]
    p2 = demo_backend.prepare(_req(turn2))
    assert tok.decode(p2.tokens) == p2.prompt_text  # exactly what the template rendered
    assert all(type(t) is int for t in p2.tokens)
    plain = tok.encode(p2.prompt_text, add_special_tokens=False)
    assert p2.tokens != plain
    # the cache holds the prompt and the whole answer, ids as generated: all of it is reused
    cached = demo_backend.prompt_cache.fetch(p2.tokens)[1]
    assert cached == len(p1.tokens) + len(generated)
    assert common_prefix(np.array(plain), np.array(p1.tokens + generated)) < len(p1.tokens) + 4

    # a third turn reuses both answers: the second turn's spliced prompt is what its entry's spans say
    answer2 = "assert parse('a: b') == ['a', ' b']"
    generated2 = spelled_out_ids(tok, answer2) + tok.encode("<|im_end|>", add_special_tokens=False)
    demo_backend.prompt_cache.store(p2.tokens + generated2, None)
    p3 = demo_backend.prepare(_req(turn2 + [("assistant", answer2), ("user", "Thanks.")]))
    assert tok.decode(p3.tokens) == p3.prompt_text
    assert demo_backend.prompt_cache.fetch(p3.tokens)[1] == len(p2.tokens) + len(generated2)


def test_an_answer_the_client_changed_is_spliced_up_to_the_change(demo_backend):
    tok = demo_backend.tokenizer
    demo_backend.prompt_cache.clear()
    turn1 = [("user", "Say something long.")]
    p1 = demo_backend.prepare(_req(turn1))
    answer = "The quick brown fox jumps over the lazy dog"
    generated = spelled_out_ids(tok, answer)
    demo_backend.prompt_cache.store(p1.tokens + generated, None)
    edited = "The quick brown cat sat"  # the client trimmed / rewrote the answer
    p2 = demo_backend.prepare(_req(turn1 + [("assistant", edited), ("user", "More.")]))
    assert tok.decode(p2.tokens) == p2.prompt_text
    cached = demo_backend.prompt_cache.fetch(p2.tokens)[1]
    kept = len(tok.decode(generated[:cached - len(p1.tokens)]))
    assert cached > len(p1.tokens) and answer[:kept] == edited[:kept] and kept >= len("The quick brown ")


def test_replacement_characters_are_never_spliced(demo_tok):
    """An answer whose ids decode to U+FFFD (bytes that are not UTF-8) came back as the character U+FFFD: its
    ids would put different bytes in the prompt than the template rendered."""
    e_acute = demo_tok.encode("é", add_special_tokens=False)
    bad = [i for i in range(256) if "\ufffd" in demo_tok.decode([i])][:1]
    assert bad, "a byte-level vocabulary has lone continuation bytes"
    ids = demo_tok.encode("ab", add_special_tokens=False) + bad + e_acute
    span_text = demo_tok.decode(ids)
    text = "P" + span_text + "tail"
    prompt = demo_tok.encode("P", add_special_tokens=False)
    entry = prompt + ids
    spans = (Span(len(prompt), "P"), Span(len(ids), span_text, True))

    def encode(t):
        return list(demo_tok.encode(t, add_special_tokens=False))

    out, out_spans = splice(text, [(entry, spans)], encode, demo_tok.decode)
    assert demo_tok.decode(out) == text
    kept = sum(s.tokens for s in out_spans if s.generated)
    assert "\ufffd" not in demo_tok.decode(out[len(prompt):len(prompt) + kept])
    assert kept == len(demo_tok.encode("ab", add_special_tokens=False))


def test_a_prompt_cut_short_keeps_only_the_spans_it_holds(demo_tok):
    c = PromptCache(1 << 30)
    ids = demo_tok.encode("hello there", add_special_tokens=False)
    c.remember(ids, (Span(len(ids), "hello there"),), demo_tok.decode)
    c.store(ids[:-1], None)  # the client left while its prompt was read
    assert list(c.entries.values())[0].spans == ()
    c.store(ids + [5, 6], None)
    spans = list(c.entries.values())[-1].spans
    assert spans[0] == Span(len(ids), "hello there") and spans[1].generated and spans[1].tokens == 2


async def test_a_conversation_through_the_engine_reuses_what_comes_back_unchanged(demo_backend):
    """Real generations on the demo model (greedy): each turn sends the previous answer back as the client got it.
    Where that is the generated text, the next turn's cached prefix reaches through the answer's own ids; where
    it is not (the demo model often opens with a space the answer's text drops), the prompt parts from the
    cache exactly where the answer starts, and says so."""
    from tinytitan.engine.engine import Engine

    demo_backend.prompt_cache.clear()
    engine = Engine(demo_backend)
    msgs = [("system", "You write code."), ("user", "Write a parser.")]
    seen = []
    for turn in range(4):
        async with engine.session(_req(msgs, max_tokens=12)) as events:
            prepared, evs = events.prepared, [ev async for ev in events]
        assert demo_backend.tokenizer.decode(prepared.tokens) == prepared.prompt_text
        miss = prepared.cache_miss
        if turn:
            seen.append(miss["reason"])
            if miss["reason"] == "hit":
                assert evs[0].cached_tokens >= held
            else:
                assert miss["reason"] == "answer_rewritten" and evs[0].cached_tokens == miss["offset"] >= prompt_len
        answer = "".join(getattr(ev, "text", "") for ev in evs if type(ev).__name__ == "TextDelta")
        prompt_len, held = len(prepared.tokens), len(prepared.tokens) + evs[-1].usage.completion_tokens - 1
        msgs = msgs + [("assistant", answer), ("user", f"And step {turn}?")]
    assert len(seen) == 3


def _spy_encode(tok, seen: list):
    def encode(t):
        seen.append(t)
        return list(tok.encode(t, add_special_tokens=False))
    return encode


def test_a_prompt_whose_end_renders_differently_keeps_its_ids_up_to_the_last_added_token(demo_tok):
    """A template that writes the generation prompt one way and the same turn in the history another (an empty
    thinking block, a trimmed answer): the cached prompt's text no longer matches as a whole. Its ids are kept up
    to the last added token before the change, and only the text from there on is tokenized — the ids are the
    plain tokenization all the same."""
    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    history = "".join(f"<|im_start|>user\nQuestion {i}: why?<|im_end|>\n<|im_start|>assistant\nBecause {i}.<|im_end|>\n"
                      for i in range(40))
    old = history + "<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = demo_tok.encode(old, add_special_tokens=False)
    new = history + "<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\nIt went on.<|im_end|>\n" \
                    "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n"
    seen: list[str] = []
    restarts = restart_tokens(demo_tok)
    assert demo_tok.convert_tokens_to_ids("<|im_start|>") in restarts
    out, spans = splice(new, [(np.array(ids), (Span(len(ids), old),))], _spy_encode(demo_tok, seen),
                        text_of(demo_tok), restarts)
    assert out == demo_tok.encode(new, add_special_tokens=False)
    assert seen == [new[old.rindex("<|im_start|>"):]]  # the last added token both texts have at that place
    assert all(type(t) is int for t in out)
    assert [s.generated for s in spans] == [False, False] and sum(s.tokens for s in spans) == len(out)
    assert "".join(s.text for s in spans) == new


def test_a_prompt_changed_early_is_tokenized_whole(demo_tok):
    """Where the change lies in the first half of the cached prompt, finding the added token before it would
    decode most of it: the text is tokenized whole, as before."""
    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    turns = "".join(f"<|im_start|>user\nQuestion {i}<|im_end|>\n" for i in range(30))
    old = "<|im_start|>system\nYou are terse.<|im_end|>\n" + turns
    new = "<|im_start|>system\nYou are kind.<|im_end|>\n" + turns + "<|im_start|>user\nMore<|im_end|>\n"
    ids = demo_tok.encode(old, add_special_tokens=False)
    seen: list[str] = []
    out, spans = splice(new, [(ids, (Span(len(ids), old),))], _spy_encode(demo_tok, seen), text_of(demo_tok),
                        restart_tokens(demo_tok))
    assert out == demo_tok.encode(new, add_special_tokens=False) and seen == [new] and len(spans) == 1


def test_a_prompt_followed_by_an_answer_that_did_not_come_back_restarts_at_its_last_added_token(demo_tok):
    """The whole cached prompt matches and nothing of the answer does: the prompt's ids are kept up to its last
    added token (the text after it may merge with what follows), the rest tokenized: the plain ids."""
    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    prompt = "".join(f"<|im_start|>user\nHi {i}<|im_end|>\n" for i in range(20)) + "<|im_start|>assistant\n"
    pids = demo_tok.encode(prompt, add_special_tokens=False)
    answer = demo_tok.encode("Hello there", add_special_tokens=False)
    new = prompt + "Goodbye<|im_end|>\n<|im_start|>user\nOk<|im_end|>\n"
    seen: list[str] = []
    out, spans = splice(new, [(pids + answer, (Span(len(pids), prompt), Span(len(answer), "Hello there", True)))],
                        _spy_encode(demo_tok, seen), text_of(demo_tok), restart_tokens(demo_tok))
    assert out == demo_tok.encode(new, add_special_tokens=False)
    assert seen == [new[prompt.rindex("<|im_start|>"):]]


def test_the_splice_reads_ids_as_the_tokenizer_writes_them(demo_tok):
    """``text_of``: the fast tokenizer's own decoding, special tokens written, numpy ids taken."""
    from tinytitan.engine.prompt.tokenizer_facts import text_of

    ids = demo_tok.encode("<|im_start|>user\nhé , . ok<|im_end|>", add_special_tokens=False)
    assert text_of(demo_tok)(np.array(ids)) == text_of(demo_tok)(ids) == demo_tok.decode(ids) \
        == "<|im_start|>user\nhé , . ok<|im_end|>"


def test_restarts_give_the_plain_ids_for_random_edits(demo_tok):
    """Random ChatML conversations, the cached prompt cut or edited anywhere (inside a word, a turn's header, an
    added token): a splice that keeps nothing generated gives exactly the plain tokenization."""
    import random

    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    rng = random.Random(7)
    words = ["def", " parse", "(h):", "\n", "  ", "return", " h", ".split", "é", "ü", "...", " ", "<think>", "</think>",
             "<|im_end|>", "\n\n", "0", "12", "x"]
    plain = lambda t: list(demo_tok.encode(t, add_special_tokens=False))  # noqa: E731
    restarted = 0
    for _ in range(60):
        turns = "".join(f"<|im_start|>{rng.choice(['user', 'assistant'])}\n"
                        + "".join(rng.choice(words) for _ in range(rng.randrange(1, 12))) + "<|im_end|>\n"
                        for _ in range(rng.randrange(2, 12)))
        cut = rng.randrange(1, len(turns))
        new = turns[:cut] + "".join(rng.choice(words) for _ in range(rng.randrange(0, 6))) + turns[cut:][:rng.randrange(0, 40)]
        ids, seen = plain(turns), []
        out, spans = splice(new, [(ids, (Span(len(ids), turns),))], _spy_encode(demo_tok, seen), text_of(demo_tok),
                            restart_tokens(demo_tok))
        assert out == plain(new), (turns, new)
        assert "".join(s.text for s in spans) == new and sum(s.tokens for s in spans) == len(out)
        restarted += seen != [new]
    assert restarted >= 10  # the rest changed in the cached prompt's first half: tokenized whole


def test_cached_prompts_that_share_only_the_opening_decode_nothing(demo_tok):
    """Every request is walked against every cached entry: one that parts from the new prompt in its first half
    (another conversation under the same system prompt) is not searched for an added token."""
    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    opening = "<|im_start|>system\nYou are terse.<|im_end|>\n"
    entries = []
    for i in range(20):
        t = opening + "".join(f"<|im_start|>user\nTopic {i} part {j}<|im_end|>\n" for j in range(8))
        ids = demo_tok.encode(t, add_special_tokens=False)
        entries.append((np.array(ids), (Span(len(ids), t),)))
    decoded = []

    def decode(ids):
        decoded.append(len(ids))
        return text_of(demo_tok)(ids)

    new = opening + "<|im_start|>user\nSomething else entirely<|im_end|>\n"
    out, spans = splice(new, entries, lambda t: list(demo_tok.encode(t, add_special_tokens=False)), decode,
                        restart_tokens(demo_tok))
    assert out == demo_tok.encode(new, add_special_tokens=False) and decoded == []


def test_an_edit_in_the_first_turn_after_a_long_opening_still_restarts_there(demo_tok):
    """The search from the span's end doubles its step: it still looks at the first added token before giving
    up (a long plain opening, then short turns, the first of them edited)."""
    from tinytitan.engine.prompt.tokenizer_facts import restart_tokens, text_of

    opening = "word " * 400
    turns = [f"<|im_start|>user\nTurn {i}<|im_end|>\n" for i in range(6)]
    old = opening + "".join(turns)
    new = opening + "<|im_start|>user\nTurn zero<|im_end|>\n" + "".join(turns[1:])
    ids = demo_tok.encode(old, add_special_tokens=False)
    seen: list[str] = []
    out, _ = splice(new, [(ids, (Span(len(ids), old),))], _spy_encode(demo_tok, seen), text_of(demo_tok),
                    restart_tokens(demo_tok))
    assert out == demo_tok.encode(new, add_special_tokens=False) and seen == [new[len(opening):]]

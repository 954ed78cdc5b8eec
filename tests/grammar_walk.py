"""Random documents of a compiled grammar, as a random-weight model writes them under the mask: a uniformly
random allowed token at every step, ending where the document may end; and
the document a JSON schema's grammar forces alone (forced_document: its fast-forward tokens, decoded)."""

from __future__ import annotations

from tinytitan.chat_request import Grammar
from tinytitan.engine.structured import compile_grammar


def random_document(compiled, rng, eos: set[int]) -> list[int]:
    """A random document of the grammar: a uniformly random allowed token at every step (what a random-weight
    model does under the mask), ending where the document may end."""
    return random_document_from(compiled, compiled.matcher(), rng, eos)


def random_document_from(compiled, matcher, rng, eos: set[int], stop: float = 0.5) -> list[int]:
    """... from ``matcher`` as it stands; where the document may end, it ends with probability ``stop``."""
    import numpy as np
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    bitmask, tokens = allocate_token_bitmask(1, compiled.vocab_size), []
    while len(tokens) < 500:
        fill_next_token_bitmask(matcher, bitmask)
        allowed = np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:compiled.vocab_size])
        choices = [int(t) for t in allowed if int(t) not in eos]
        if matcher.is_accepting() and (not choices or rng.random() < stop):
            return tokens
        token = rng.choice(choices)
        assert matcher.consume_token(token), matcher.get_error()
        tokens.append(token)
    raise AssertionError("the document did not end")


def forced_document(schema: dict, tok) -> str:
    g = compile_grammar(Grammar("json_schema", schema), tok)
    m = g.matcher()
    out = []
    for _ in range(50):
        ff = m.compute_ff_tokens()
        if not ff:
            break
        m.consume_tokens(ff)
        out += ff
    assert not m.is_error(), m.get_error()
    return tok.decode(out)

"""Structured output in the engine: grammars compiled for a tokenizer, and the mask that enforces them.

- ``compile.py``: a request's Grammar → a compiled grammar for the model's tokenizer (the tokenizer is
  prepared once per model, each grammar once per schema); what the compiler cannot promise is the
  client's 400, named; ``best_effort.py``: a format that is not strict, loosened until the compiler takes it.
- ``processor.py``: the per-request logits processor that masks every token the grammar does not allow.
- each of those caches (a grammar, its check, a loosened schema) is the package's bounded, thread-safe memo
  (``tinytitan/memo.py``).

The grammar engine is llguidance: it takes JSON schemas and Lark grammars and computes a token mask from
a byte-level parser in a fraction of a millisecond (README, "Structured output", has the numbers).
"""

from .compile import CompiledGrammar, compile_grammar
from .processor import GrammarMask

__all__ = ["CompiledGrammar", "GrammarMask", "compile_grammar"]

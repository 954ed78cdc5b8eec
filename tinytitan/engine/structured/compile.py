"""A request's Grammar → an llguidance grammar checked against the model's tokenizer.

Rules:
- The tokenizer is converted once per tokenizer object (``llg_tokenizer``); a grammar is translated once per
  distinct source (an LRU of ``CACHE_SIZE`` entries keyed by the JSON of kind and source, its keys in the order
  sent: a schema's property order is its document's) and
  checked against a tokenizer once (an LRU of as many); each request makes only its own matcher.
- JSON is compact: no whitespace between tokens (a weak model could otherwise pad a document forever),
  and the compiler is never lenient (a keyword it would ignore is an error here, not a looser document).
- A call's JSON is spelt in the family's own layout (``JsonLayout``: the separators its template renders, or
  at most one space between tokens where the family's layout varies), never padded without bound.
- A grammar the compiler refuses is the client's 400 naming the request field it came from.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from ...chat_request import Grammar
from ...errors import invalid
from ...output_format import keywords, map_subschemas, vacuous_property_names
from ...memo import BoundedMemo

CACHE_SIZE = 256
# The escapes a JSON string may use. llguidance (1.9) admits an extra key (one that is not a declared property,
# where other keys are allowed) as any string but the declared names as written, so ``"\u0062"`` would be a second
# spelling of a declared ``"b"`` held to the extra keys' schema, not to b's: where a schema has such an object, a
# string takes no ``\u`` (a key has one spelling; a control character other than these has none, never produced).
# Elsewhere ``\u`` stays: the only spelling of a control character a const, enum or pattern may hold (ESC, ^C).
ALL_ESCAPES = "\"\\bfnrtu"
ONE_SPELLING = "\"\\bfnrt"
JSON_OPTIONS = {"whitespace_flexible": False, "lenient": False, "coerce_one_of": False,
                "item_separator": ",", "key_separator": ":"}


def escapes(schema: Any) -> dict:
    """The ``json_allowed_escapes`` override for ``schema`` (see ALL_ESCAPES). Where a const or enum holds a control
    character only ``\\u`` can spell, ``\\u`` stays even beside an object that admits extra keys: without it the
    compiler would leave the character out (a document breaking its const); a key may then be spelt twice there."""
    if not _open_object(schema) or _unspellable(schema) is not None:
        return {"json_allowed_escapes": ALL_ESCAPES}
    return {"json_allowed_escapes": ONE_SPELLING}


def _subschemas(schema: dict):
    """The subschemas of ``schema`` (``keywords``)."""
    for _, value, shape in keywords(schema):
        if shape == "one":
            yield value
        elif shape == "list" and isinstance(value, list):
            yield from value
        elif shape == "map" and isinstance(value, dict):
            yield from value.values()


def _open_object(schema: Any) -> bool:
    """Somewhere in ``schema``, an object that declares properties and admits other keys."""
    if not isinstance(schema, dict):
        return False
    if isinstance(schema.get("properties"), dict) and schema["properties"] \
            and schema.get("additionalProperties", True) is not False:
        return True
    return any(_open_object(sub) for sub in _subschemas(schema))


_CONTROL = re.compile("[\\x00-\\x07\\x0b\\x0e-\\x1f]")  # what only \\u spells


def _unspellable(schema: Any) -> str | None:
    """A control character only ``\\u`` spells, held by a const or enum somewhere in ``schema`` (None: none)."""
    def found(value: Any) -> str | None:  # in a string, or any key or value inside an object or array
        if isinstance(value, str):
            hit = _CONTROL.search(value)
            return hit.group() if hit else None
        parts = [p for pair in value.items() for p in pair] if isinstance(value, dict) else \
            value if isinstance(value, list) else []
        return next((hit for part in parts if (hit := found(part)) is not None), None)

    if not isinstance(schema, dict):
        return None
    for value in ([schema["const"]] if "const" in schema else []) + (
            schema["enum"] if isinstance(schema.get("enum"), list) else []):
        if (hit := found(value)) is not None:
            return hit
    return next((hit for sub in _subschemas(schema) if (hit := _unspellable(sub)) is not None), None)


@dataclass(frozen=True)
class JsonLayout:
    """How a JSON value is spelt: the separators between items and after keys, and ``space``, a regex of the
    whitespace allowed between any two tokens (None: none beyond the separators)."""
    item: str
    key: str
    space: str | None = None

    def options(self) -> dict:
        if self.space is None:
            return {**JSON_OPTIONS, "item_separator": self.item, "key_separator": self.key}
        return {**JSON_OPTIONS, "item_separator": self.item, "key_separator": self.key,
                "whitespace_flexible": True, "whitespace_pattern": self.space}

    def lark(self, *pieces: str) -> str:
        """JSON text made of ``pieces`` (a separator is the piece "," or ":") as a lark sequence."""
        if self.space is None:
            return json.dumps("".join(self.item if p == "," else self.key if p == ":" else p for p in pieces))
        return ' " "? '.join(json.dumps(p) for p in pieces)


COMPACT = JsonLayout(",", ":")  # structured output (a document the client asked for)
SPACED = JsonLayout(", ", ": ")  # what Jinja's ``tojson`` (and ``json.dumps``) renders: most families' calls
ONE_SPACE = JsonLayout(",", ":", "[ ]?")  # a family whose layout varies: compact or spaced, one space at most

# Formats enforced by a pattern of our own, a subset of what a JSON-schema validator accepts (the
# compiler's own date admits year 0000 and 29 February of any year; RFC 3339's leap second :60 is left out
# as Python's validators refuse it). 29 February is never produced.
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_DAY = ("(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
        "|02-(?:0[1-9]|1[0-9]|2[0-8]))")
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
FORMAT_PATTERNS = {"date": f"^{_YEAR}-{_DAY}$", "time": f"^{_TIME}$", "date-time": f"^{_YEAR}-{_DAY}T{_TIME}$"}

_lock = threading.Lock()
_tokenizers: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, LLTokenizer): few, kept for life
_grammars: BoundedMemo[tuple[str, str], str] = BoundedMemo(CACHE_SIZE)  # (kind, source's JSON) -> llguidance's
_checked: BoundedMemo[tuple[int, str], None] = BoundedMemo(CACHE_SIZE)  # (id(LLTokenizer), text): passed the check
_empty: BoundedMemo[str, tuple[str, str] | None] = BoundedMemo(CACHE_SIZE)  # unsatisfiable's answers
_markers: dict[int, dict[str, int]] = {}  # id(LLTokenizer) -> token_markers: few, kept for life


@dataclass(frozen=True)
class CompiledGrammar:
    """A grammar ready to mask: each request makes its own matcher (``matcher()``)."""
    text: str  # llguidance's grammar
    tokenizer: Any  # llguidance.LLTokenizer
    vocab_size: int  # the width of the model's logits
    name: str | None = None

    def matcher(self):
        import llguidance

        return llguidance.LLMatcher(self.tokenizer, self.text)


def llg_tokenizer(tokenizer, vocab_size: int | None = None):
    """llguidance's view of an mlx-lm TokenizerWrapper (its HF tokenizer inside), made once per tokenizer.
    The end-of-sequence tokens are the wrapper's (the family's end-of-turn tokens included)."""
    with _lock:
        hit = _tokenizers.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
    import copy

    import llguidance

    # the Rust tokenizer of a fast Hugging Face tokenizer (public; mlx-lm's wrapper hands attributes through),
    # serialised for llguidance as its own hf.from_tokenizer does, padding and truncation off
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("grammar masks need a fast (Rust) Hugging Face tokenizer")
    backend = copy.copy(backend)
    backend.no_padding()
    backend.no_truncation()
    eos = sorted(getattr(tokenizer, "eos_token_ids", None) or []) or getattr(tokenizer, "eos_token_id", None)
    n_vocab = max(vocab_size or 0, backend.get_vocab_size(with_added_tokens=True)) or None
    llt = llguidance.LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=eos)
    with _lock:
        _tokenizers[id(tokenizer)] = (tokenizer, llt)
    return llt


def token_markers(tokenizer, vocab_size: int | None = None) -> dict[str, int]:
    """The vocabulary entries a grammar may name as one token (``<[id]>``): the grammar engine's special tokens
    (a tokenizer's added tokens), by text. Any other marker, even one that is a single ordinary token (Gemma's
    ```` ``` ````), is matched by its text: llguidance (1.9) takes ``<[id]>`` of an ordinary token once but
    refuses the same token after a rollback over it, which the decoder's forced runs and verified drafts do; and
    free text can spell such a token anyway. Empty where llguidance cannot read the tokenizer (no grammar
    compiles for it then)."""
    try:
        llt = llg_tokenizer(tokenizer, vocab_size)
    except ValueError:
        return {}
    with _lock:
        hit = _markers.get(id(llt))
    if hit is None:
        hit = {text: i for text, i in tokenizer.get_vocab().items() if i < llt.vocab_size and llt.is_special_token(i)}
        with _lock:
            _markers[id(llt)] = hit
    return hit


def grammar_text(grammar: Grammar) -> str:
    """The llguidance grammar for a Grammar (cached per source; a source it cannot translate is not cached)."""
    # keys in the order sent, never sorted: two schemas that differ only in their properties' order are two
    # grammars (the document follows the schema's order, as OpenAI's structured outputs promise)
    key = (grammar.kind, json.dumps(grammar.source, ensure_ascii=False))
    return _grammars.recall(key, lambda: _translated(grammar))


def _translated(grammar: Grammar) -> str:
    import llguidance

    if grammar.kind in ("json_schema", "json_object"):
        return schema_grammar(grammar.source)
    if grammar.kind == "lark":
        return llguidance.LLMatcher.grammar_from_lark(grammar.source)
    if grammar.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(grammar.source)
    raise ValueError(f"unknown grammar kind {grammar.kind!r}")


def schema_grammar(schema: Any) -> str:
    """llguidance's grammar for a JSON schema, as structured output compiles it (not cached)."""
    import llguidance

    schema = with_format_patterns(schema)
    return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides={**JSON_OPTIONS, **escapes(schema)})


def schema_fault(schema: Any) -> str | None:
    """Why the compiler refuses ``schema``, whatever the tokenizer (None: it takes it): what a schema alone can
    get wrong (a pattern it cannot read, a oneOf it cannot prove exclusive, bounds no value meets …)."""
    import llguidance

    try:
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(schema_grammar(schema), None)
    except ValueError as exc:
        return _one_line(str(exc))
    return "; ".join(_one_line(m) for m in messages) or "invalid grammar" if is_error or messages else None


def _one_line(message: str) -> str:
    """A compiler message (regex errors come with a caret diagram) as one line."""
    lines = [ln.strip() for ln in message.splitlines()]
    return " ".join(ln for ln in lines if ln and set(ln) != {"^"})


def with_format_patterns(schema: Any) -> Any:
    """A copy of ``schema`` whose date / time / date-time formats are patterns (FORMAT_PATTERNS); walks
    subschemas only (a ``const`` or a property named ``format`` is left alone), a draft-07 tuple's too (an
    ``items`` array and its ``additionalItems``, which the compiler reads as written, whatever ``$schema``
    says). A property-name schema every key satisfies (``vacuous_property_names``) is left out: the compiler
    implements none. So is ``$schema``: the keyword table reads 2020-12, and the compiler told draft-07 would
    ignore a ``prefixItems`` (a loosened document)."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value, shape in keywords(schema):
        if key == "$schema" or (key == "propertyNames" and vacuous_property_names(value)):
            continue
        out[key] = map_subschemas(value, shape, with_format_patterns)
    _within_reach(out)
    pattern = FORMAT_PATTERNS.get(out.get("format")) if isinstance(out.get("format"), str) else None
    if pattern is not None:
        del out["format"]
        if "pattern" in out:  # both must hold
            out["allOf"] = list(out.get("allOf", [])) + [{"pattern": pattern}]
        else:
            out["pattern"] = pattern
    return out


REACH = 9e18  # the compiler writes a number range within ±2**63; a bound past it (Zod 4's z.float64(): ±1.8e308)


def _within_reach(schema: dict) -> None:
    """A number's upper bound past REACH becomes REACH, a lower bound below -REACH becomes -REACH: the document
    only narrows (and still holds to the schema), where the compiler would refuse the range. Where that would
    leave no number (a minimum past REACH too), nothing moves and the compiler refuses the range."""
    moved = dict(schema)
    for key, sign in (("maximum", 1), ("exclusiveMaximum", 1), ("minimum", -1), ("exclusiveMinimum", -1)):
        value = moved.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value * sign > REACH:
            moved[key] = sign * REACH
    if moved == schema:
        return
    bounds = [moved.get(k) for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")]
    low = max((b for b in bounds[:2] if isinstance(b, (int, float))), default=-REACH)
    high = min((b for b in bounds[2:] if isinstance(b, (int, float))), default=REACH)
    if low < high:
        schema.update(moved)


def arguments_schema(parameters: dict | None) -> dict:
    """A tool's parameters as its calls' arguments are held to: an object always (a schema that names no type
    admits any JSON value, and a call's arguments are an object)."""
    schema = parameters or {"type": "object"}
    return schema if "type" in schema else {**schema, "type": "object"}


def json_rule(schema: Any, layout: JsonLayout = COMPACT) -> str:
    """A lark rule body holding a JSON value to ``schema``, spelt in ``layout``, its date / time / date-time
    formats held to our own patterns (FORMAT_PATTERNS) as structured output's are."""
    options = {**layout.options(), **escapes(schema)}
    return "%json " + json.dumps({**with_format_patterns(schema), "x-guidance": options}, ensure_ascii=False)


def custom_tool_refused(tool_name: str, markup: str):
    """The 400 for a custom tool in a forced call whose ``markup`` cannot carry its input grammar."""
    return invalid(f"tool_choice forces a call, and '{tool_name}' is a custom tool: this model's {markup} cannot "
                   "carry its input grammar yet", param="tool_choice", code="unsupported_value")


def _admits_nothing(text: str, llt) -> str | None:
    """Why a grammar that validates still admits nothing from its start (None: it admits something): the
    compiler takes a schema whose root only refers to itself (``{"$ref": "#"}``, a cycle of ``$defs``), and its
    matcher's first mask then fails, leaving only end-of-sequence — an empty answer that is no document."""
    import llguidance
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    matcher = llguidance.LLMatcher(llt, text)
    fill_next_token_bitmask(matcher, allocate_token_bitmask(1, llt.vocab_size))
    if not matcher.is_error():
        return None
    first = (matcher.get_error() or "").strip().splitlines()
    # only a grammar with no way on at all (llguidance's NoExtension); a grammar too complex for the matcher's
    # limits is told at generation, where it hits them (processor.failure_message)
    return first[0] if first and first[0].startswith("NoExtension") else None


NO_VALUE, _UNSATISFIABLE = "no value satisfies this schema", "Unsatisfiable schema: "  # ours, llguidance's


def unsatisfiable(schema: Any) -> tuple[str, str] | None:
    """Where in ``schema`` no value can be written, and why: (the path below it, ``.properties.n``, into the
    required property llguidance blames; the reason, ``minimum (5) is greater than maximum (1)``), or None.
    Remembered by the schema's text: a strict tool's schema is checked on every request that sends it."""
    return _empty.recall(json.dumps(schema, sort_keys=True, default=str), lambda: _unsatisfiable(schema))


def _unsatisfiable(schema: Any) -> tuple[str, str] | None:
    fault = schema_fault(schema)
    if not fault or not fault.startswith(_UNSATISFIABLE):
        return None
    reason = fault.removeprefix(_UNSATISFIABLE)
    blamed = re.fullmatch(r"required property '(.+)' is unsatisfiable", reason)
    inner = (schema.get("properties") or {}).get(blamed[1]) if blamed and isinstance(schema, dict) else None
    found = _unsatisfiable(inner) if isinstance(inner, dict) else None  # (one that refers outside itself: None)
    return (f".properties.{blamed[1]}{found[0]}", found[1]) if found else ("", reason)


def compile_grammar(grammar: Grammar, tokenizer, vocab_size: int | None = None) -> CompiledGrammar:
    """Compile and check ``grammar`` for ``tokenizer``; ApiError (400, naming ``grammar.where``) when the
    compiler cannot promise it."""
    llt = llg_tokenizer(tokenizer, vocab_size)
    where = grammar.where or "grammar"
    try:
        text = grammar_text(grammar)
    except ValueError as exc:
        raise invalid(f"The grammar at '{where}' cannot be compiled: {exc}", param=where,
                      code="unsupported_schema") from None
    # the LLTokenizer is kept for life (_tokenizers): its id is its own; a grammar refused is checked again
    _checked.recall((id(llt), text), lambda: _check(grammar, text, llt, where))
    return CompiledGrammar(text, llt, max(vocab_size or 0, llt.vocab_size), grammar.name)


def _check(grammar: Grammar, text: str, llt, where: str) -> None:
    """ApiError (400, naming ``where``, or the property below it no value satisfies) where the compiler cannot
    promise ``text`` for ``llt``."""
    import llguidance

    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(text, llt)
    detail = None
    if is_error or messages:  # a warning is something the compiler would not enforce: refused too
        detail = "; ".join(_one_line(m) for m in messages) or "invalid grammar"
    elif _admits_nothing(text, llt) is not None:  # (a schema that is only a reference to itself …)
        detail = f"{NO_VALUE}: the grammar it compiles to admits no output at all"
    if detail is not None and _UNSATISFIABLE in detail and isinstance(grammar.source, dict):
        found = unsatisfiable(grammar.source)  # (llguidance's words: "Unsatisfiable schema: required property …")
        if found is not None:
            where, detail = where + found[0], f"{NO_VALUE}: {found[1]}"
    if detail is not None:
        what = "schema" if grammar.kind.startswith("json") else f"{grammar.kind} grammar"
        raise invalid(f"The {what} at '{where}' cannot be enforced: {detail}", param=where,
                      code="unsupported_schema")

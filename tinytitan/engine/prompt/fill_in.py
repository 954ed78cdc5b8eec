"""Fill-in-the-middle (``ChatRequest.suffix``: legacy Completions' and Ollama's ``suffix``): the model's layout of a
prompt with a gap, found by the markers its vocabulary has, and that prompt's text.

Rules:
- A layout is the markers a vocabulary must have and the prompt with its gap (``FIM_LAYOUTS``); the first whose
  markers the vocabulary has is the model's. A suffix to a model with none is the client's 400 naming ``suffix``.
- The prompt is built token by token, as llama.cpp's infill and Meta's ``infilling_prompt_tokens`` build it: each
  marker its id, the prefix and the suffix each encoded alone. Encoded as one string, a SentencePiece-style
  tokenizer reads each gap as a text of its own or not at all: a legacy one (a ``Prepend("▁")`` normalizer) gives
  every piece between special tokens the leading ``▁`` a text starts with, a newer one (``Metaspace``,
  ``prepend_scheme="first"``) only the first, which there is the marker, so the prefix lost its ``▁``.
- CodeLlama's suffix is encoded without that leading ``▁`` (``SPACELESS_SUFFIX``; Meta's ``encode_infilling``,
  transformers' CodeLlamaTokenizer): the layout's ``<PRE> {prefix} <SUF>{suffix} <MID>`` has its spaces in the
  markers (``▁<SUF>``) and before the prefix only. Other layouts' gaps are each encoded as the tokenizer encodes a
  text (Codestral's too: mistral_common's ``encode_fim`` encodes each alone).
- The gaps are the client's code, read as text (``_text_ids``): a special token's spelling in them (a source file
  holding ``"<|endoftext|>"`` or ``"<fim_middle>"``) stays those characters, as llama.cpp's infill tokenizes its
  prefix and suffix (``parse_special`` false) and mistral_common encodes any text; read as the token, the model saw
  a false end or a false marker in the gap (the tokenizer's own ids where it matched none of them: reading them as
  text needs a copy of the tokenizer, made only for a gap that spells one). A raw prompt without a suffix is read
  with its special tokens, as llama.cpp's and vLLM's completions read one: such a prompt is often written in the
  model's template on purpose.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable

from tokenizers import AddedToken

from ...chat_request import ChatRequest
from ...errors import invalid
from .tokenizer_facts import ids_of, once_per_tokenizer


# fill-in-the-middle layouts, as the model families that train on them write a prompt with a gap: the markers a
# vocabulary must have (prefix, suffix and, where the layout has one, middle), spelled as the vocabulary spells them,
# which is how their ids are found; and the prompt, ``{prefix}`` the text before the gap and
# ``{suffix}`` the text after it (llama.cpp's infill and Ollama's templates lay each out so)
FIM_LAYOUTS = (
    (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-coder, Qwen3-coder, CodeGemma
     "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"),
    (("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder, StarCoder2
     "<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"),
    (("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder (V1, V2)
     "<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>"),
    (("▁<PRE>", "▁<SUF>", "▁<MID>"),  # CodeLlama, as its tokenizer spells them (the space is the token's)
     "▁<PRE>{prefix}▁<SUF>{suffix}▁<MID>"),
    (("<PRE>", "<SUF>", "<MID>"), "<PRE>{prefix}<SUF>{suffix}<MID>"),  # CodeLlama converted without the space
    (("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),  # SantaCoder
     "<fim-prefix>{prefix}<fim-suffix>{suffix}<fim-middle>"),
    (("<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"),  # GLM-4.5
     "<|code_prefix|>{prefix}<|code_suffix|>{suffix}<|code_middle|>"),
    (("<|prefix|>", "<|suffix|>", "<|middle|>"), "<|prefix|>{prefix}<|suffix|>{suffix}<|middle|>"),  # Falcon-H1 coder
    # Codestral and Mistral's other v3 tokenizers: the suffix first, then the prefix the model goes on from, and no
    # middle marker (mistral_common's encode_fim; Ollama's codestral template: [SUFFIX]{{ .Suffix }}[PREFIX] …)
    (("[PREFIX]", "[SUFFIX]"), "[SUFFIX]{suffix}[PREFIX]{prefix}"))
# the suffix markers after which the suffix is encoded without the leading ``▁`` a SentencePiece tokenizer gives a
# text (CodeLlama's, see the rules)
SPACELESS_SUFFIX = ("▁<SUF>", "<SUF>")
# a text that opens with it encodes to its own ids and then the rest's, none merged across (a byte-fallback
# newline in a SentencePiece vocabulary): stripped, the rest's ids without a text's leading ``▁``
_SENTINEL = "\n"
_GAPS = re.compile(r"(\{prefix\}|\{suffix\})")
_AS_TEXT: dict[int, tuple[Any, Callable[[str], list[int]]]] = {}  # id(tokenizer) -> (tokenizer, its ``as_text``)
_LAYOUTS: dict[int, tuple[Any, tuple | None]] = {}  # id(tokenizer) -> (tokenizer, its layout or None)
_TEXT_COPIES: dict[int, tuple[Any, Any]] = {}  # id(tokenizer) -> (tokenizer, its ``_text_copy``)

# the tokens that end a filled-in middle where the model's end of sequence does not: CodeLlama ends one with
# its end-of-infill token, and without it as a stop writes on past the gap; a coder model that goes on with its
# repository format's padding, next file or repository name has left the gap too. llama.cpp ends generation on
# each of them (its FIM_PAD, FIM_REP and FIM_SEP spellings and ``<EOT>``, ggml-org/llama.cpp#9606): Qwen-coder's,
# StarCoder2's, StarCoder's and Granite's (``<reponame>``), SantaCoder's (``<fim-pad>``), and the others it lists
FIM_ENDS = ("▁<EOT>", "<EOT>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|fim_repo|>", "<fim_pad>",
            "<file_sep>", "<repo_name>", "<reponame>", "<fim-pad>", "<fim-repo>", "<PAD>", "[PAD]", "<REPO>")
_FIM_TOKENS = frozenset(FIM_ENDS).union(*(markers for markers, _ in FIM_LAYOUTS))


def _control(token: str) -> bool:
    """Whether llama.cpp reads ``token`` as a control token, whatever its tokenizer's ``special`` flag says: its
    converter's ``does_token_look_special`` (``<|…|>``, ``<｜…｜>``) and its loader's FIM markers and ends."""
    return (token.startswith("<|") and token.endswith("|>")) or (token.startswith("<｜") and token.endswith("｜>")) \
        or token in _FIM_TOKENS


def as_text(tokenizer) -> Callable[[str], list[int]]:
    """How ``tokenizer`` encodes a text with a special token's spelling in it read as its characters, no special
    tokens added. A fast tokenizer: its Rust tokenizer's own encoding, where that holds none of the added tokens
    read as text here (it then split the text nowhere the reading as text would not, and the two are the same ids)
    and was neither cut nor padded (a setting another caller left on); else that of a copy of its Rust tokenizer
    with ``encode_special_tokens`` on (``_text_copy``), made the first time a text needs it (a copy of a 128k
    vocabulary takes a second: an editor's code rarely spells a special token). The Rust tokenizer, not the
    wrapper's ``encode``, which a subclass reworks: transformers' CodeLlamaTokenizer reads a text holding
    ``<FILL_ME>`` as an infill prompt, dropping the token's spelling at a text's end, failing on two, and setting
    its own normalizer on the tokenizer every request shares meanwhile.
    Other tokenizers take ``split_special_tokens`` per call, and one that refuses it (mistral-common's) reads
    none in a text."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        read_as_text = frozenset(i for i, t in backend.get_added_tokens_decoder().items()
                                 if t.special or _control(t.content))

        def encode_fast(text: str) -> list[int]:
            shared = backend.encode(text, add_special_tokens=False)
            if read_as_text.isdisjoint(shared.ids) and not shared.overflowing and 0 not in shared.attention_mask:
                return list(shared.ids)
            copied = once_per_tokenizer(_TEXT_COPIES, tokenizer, lambda: _text_copy(backend))
            return list(copied.encode(text, add_special_tokens=False).ids)

        return encode_fast

    def encode(text: str) -> list[int]:
        try:
            return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
        except (TypeError, ValueError):
            return list(tokenizer.encode(text, add_special_tokens=False))

    return encode


def _text_copy(backend):
    """A copy of a Rust tokenizer that reads special tokens as text (``encode_special_tokens``), kept for the
    gaps alone: transformers' ``split_special_tokens=True`` sets that flag on the tokenizer every request shares,
    where a chat prompt encoded on another thread meanwhile would read its template's markers as text. The copy
    reads as text the added tokens llama.cpp makes control tokens too (``_control``): Qwen-coder's and CodeGemma's
    tokenizers leave their FIM, pad and file tokens unflagged, and ``encode_special_tokens`` still matched those."""
    backend = copy.copy(backend)
    backend.encode_special_tokens = True
    unflagged = [t for t in backend.get_added_tokens_decoder().values() if not t.special and _control(t.content)]
    backend.add_special_tokens([AddedToken(t.content, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                                           normalized=t.normalized, special=True)
                                for t in unflagged])  # (the copy's alone: same ids, now read as text)
    backend.no_padding()
    backend.no_truncation()
    return backend


class FillInTheMiddle:
    """A part of prompt preparation (``prepare.py``): a raw prompt with a suffix, in the model's layout."""

    @property
    def fim_layout(self) -> tuple[tuple[str, ...], str] | None:
        """The model's fill-in-the-middle layout (``FIM_LAYOUTS``: its markers, and the prompt with its gap), where
        its vocabulary has the markers. Found once per tokenizer (``once_per_tokenizer``), for every preparation of
        it: reading a vocabulary of 50k tokens takes tens of milliseconds, and an editor's completion waits for it
        at every request."""
        tokenizer = self.tokenizer

        def measure() -> tuple[tuple[str, ...], str] | None:
            try:
                vocab = tokenizer.get_vocab() if tokenizer is not None else {}
            except Exception:
                vocab = {}
            return next((layout for layout in FIM_LAYOUTS if all(t in vocab for t in layout[0])), None)

        return once_per_tokenizer(_LAYOUTS, tokenizer, measure)

    @property
    def fim_tokens(self) -> tuple[str, ...] | None:
        """The model's fill-in-the-middle markers (prefix, suffix and, where its layout has one, middle)."""
        layout = self.fim_layout
        return layout[0] if layout else None

    def raw_prompt(self, req: ChatRequest) -> tuple[str, list[int]]:
        """A raw prompt as the model reads it, its text and its ids (no BOS: the caller's); with a suffix, the
        model's fill-in-the-middle layout: its markers as their ids, each gap encoded alone (see the rules)."""
        if req.suffix is None:
            return req.prompt or "", ids_of(self.tokenizer)(req.prompt or "")
        markers, text = self._layout()
        ids: list[int] = []
        for part in _GAPS.split(text):
            if part == "{prefix}":
                ids += self._text_ids(req.prompt or "")
            elif part == "{suffix}":
                ids += self._spaceless(req.suffix) if markers[1] in SPACELESS_SUFFIX else self._text_ids(req.suffix)
            elif part:  # a marker (the layouts write nothing else between their gaps)
                ids.append(self.tokenizer.convert_tokens_to_ids(part))
        return text.format(prefix=req.prompt or "", suffix=req.suffix), [int(i) for i in ids]

    def _spaceless(self, text: str) -> list[int]:
        """``text``'s ids without the leading ``▁`` a SentencePiece tokenizer gives a text: those of ``_SENTINEL``
        and ``text`` less the sentinel's own (as Meta's ``encode_infilling`` strips its ``☺``), where they begin
        with them; else ``text``'s as the tokenizer encodes it."""
        if not text:
            return []
        lead = self._text_ids(_SENTINEL)
        both = self._text_ids(_SENTINEL + text)
        if lead and both[:len(lead)] == lead:
            return both[len(lead):]
        return self._text_ids(text)

    def _text_ids(self, text: str) -> list[int]:
        """``text``'s ids, a special token's spelling in it read as its characters (see the rules)."""
        return once_per_tokenizer(_AS_TEXT, self.tokenizer, lambda: as_text(self.tokenizer))(text)

    def _layout(self) -> tuple[tuple[str, ...], str]:
        layout = self.fim_layout
        if layout is None:
            raise invalid(f"'suffix' (fill-in-the-middle) is not supported by '{self.model_id}': its vocabulary has "
                          "no fill-in-the-middle tokens", param="suffix", code="unsupported_parameter",
                          data={"model": self.model_id, "check": "fill_in"})  # (Ollama words it its own way)
        return layout

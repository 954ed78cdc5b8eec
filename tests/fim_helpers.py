"""What the fill-in-the-middle and prompt-text tests share: the scripted backend keeping the ids each prompt was
read as, and transformers' CodeLlamaTokenizer on a small vocabulary."""

from __future__ import annotations

from mlx_lm.tokenizer_utils import TokenizerWrapper
from transformers.models.code_llama.tokenization_code_llama import CodeLlamaTokenizer

from backends import Recording

MODEL = "tinytitan-scripted"


class KeepingIds(Recording):
    """The scripted backend, keeping the ids each prompt was read as."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ids: list[list[int]] = []

    def prepare(self, req):
        prepared = super().prepare(req)
        self.ids.append(list(prepared.tokens))
        return prepared


def codellama_tokenizer(**kwargs):
    """transformers' CodeLlamaTokenizer, as AutoTokenizer loads CodeLlama's, on a small byte-fallback vocabulary
    (``kwargs``: the class's own, ``fill_token`` one)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for ch in "▁abcdefghijklmnopqrstuvwxyzFILME_=#<>":
        vocab.setdefault(ch, len(vocab))
    return TokenizerWrapper(CodeLlamaTokenizer(vocab=vocab, merges=[], **kwargs))

"""The demo tokenizer: a byte-level BPE trained on the corpus, and its tokenizer_config.json."""

from __future__ import annotations

from typing import Any, Dict, List

from .recipe import ADDED_TOKENS, PRETOKENIZE_REGEX, SPECIAL_TOKENS
from .template import CHAT_TEMPLATE


def _train_tokenizer(vocab_size: int, corpus: List[str], special: List[str] = SPECIAL_TOKENS,
                     added: List[str] = ADDED_TOKENS):
    """A byte-level BPE of ``vocab_size`` ids: ``special`` (skipped by ``skip_special_tokens``) and ``added``
    (kept on decode) after the trained ones."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_added = len(special) + len(added)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    trained = tok.get_vocab_size()
    if trained != vocab_size - n_added:
        raise RuntimeError(f"demo tokenizer trained to {trained} tokens, expected {vocab_size - n_added}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    if added:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    return tok


def _tokenizer_config(tok) -> Dict[str, Any]:
    decoder = {}
    for t in SPECIAL_TOKENS + ADDED_TOKENS:
        decoder[str(tok.token_to_id(t))] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL_TOKENS,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }

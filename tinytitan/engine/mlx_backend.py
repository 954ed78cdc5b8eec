"""The MLX backend: mlx-lm's loader, chat template and ``stream_generate``.

Decoding runs in a worker thread (the engine puts it there); each generated token's text goes to the
DecodeLoop, which decides its channel. Sampling defaults come from the model's generation_config.json
where it has one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

from .backend import Backend, Prepared
from .decode_loop import DecodeLoop

log = logging.getLogger("tinytitan.mlx")

FALLBACK_SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 0}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class MLXBackend(Backend):
    def __init__(self, model_dir: str | Path, model_id: str | None = None, default_reasoning=None):
        import mlx_lm

        self.path = Path(model_dir)
        self.model_id = model_id or self.path.name
        self.default_reasoning = default_reasoning
        log.info("loading %s from %s", self.model_id, self.path)
        self.model, self.tokenizer = mlx_lm.load(str(self.path))
        config = read_json(self.path / "config.json")
        self.config = config
        vocab = self.tokenizer.get_vocab()
        for stop in self.family.stop_tokens:  # the family's end-of-turn tokens end generation
            if stop in vocab and vocab[stop] not in self.tokenizer.eos_token_ids:
                self.tokenizer.add_eos_token(stop)
        text_config = config.get("text_config", config)
        self.context_window = int(text_config.get("max_position_embeddings") or 32768)
        gen = read_json(self.path / "generation_config.json")
        self.sampling = {k: gen.get(k, v) for k, v in FALLBACK_SAMPLING.items()}
        log.info("loaded %s: context window %d tokens, %s family", self.model_id, self.context_window,
                 self.family.name)

    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        req = prepared.req
        temp = self.sampling["temperature"] if req.temperature is None else req.temperature
        sampler = make_sampler(
            temp=temp,
            top_p=self.sampling["top_p"] if req.top_p is None else req.top_p,
            min_p=req.min_p or 0.0,
            top_k=(self.sampling["top_k"] or 0) if req.top_k is None else req.top_k,
        )
        processors = make_logits_processors(
            repetition_penalty=req.repetition_penalty,
            presence_penalty=req.presence_penalty or None,
            frequency_penalty=req.frequency_penalty or None,
        )
        if req.seed is not None:
            mx.random.seed(req.seed)
        loop.start(len(prepared.tokens), 0)
        hit_length = False
        for resp in stream_generate(self.model, self.tokenizer, mx.array(prepared.tokens),
                                    max_tokens=prepared.max_tokens, sampler=sampler,
                                    logits_processors=processors):
            if should_stop():
                return
            if resp.finish_reason == "stop":  # the end-of-turn token: not content
                if resp.text:
                    loop.parser_text(resp.text)
                break
            if not loop.token(resp.text):
                break
            if resp.finish_reason == "length":
                hit_length = True
        loop.end(hit_length)

    def describe(self) -> dict:
        return {"id": self.model_id, "context_window": self.context_window, "path": str(self.path)}

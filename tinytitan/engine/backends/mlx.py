"""The MLX backend: mlx-lm's loader and chat template, the request's sampler and logits processors.

Decoding runs on the model thread through the decoder's step (scheduler.py, step.py); each generated token's
text goes to the DecodeLoop, which decides its channel. Sampling defaults come from the model's
generation_config.json where it has one, as do its default stop strings (``stop_strings``, transformers'
key), its default system prompt (``system_prompt``) and turns (``default_messages``: what a library such
as Ollama's gives the model).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

from ...chat_request import Message
from ...progress import Progress
from .base import Backend
from ..prompt.prepare import FALLBACK_SAMPLING, Prepared
from ..prompt.fill_in import FIM_ENDS
from ..decode.token_events import DecodeLoop
from ..cache.memory import PromptCache
from ..speculative.speculator import SpeculativeConfig, Speculator

DEFAULT_PROMPT_CACHE_MIB = 2048

log = logging.getLogger("tinytitan.mlx")

def _flat(params):
    from mlx.utils import tree_flatten

    return tree_flatten(params)


def read_json(path: Path, required: bool = False) -> dict:
    """A model file's JSON object: {} where the file is missing or not JSON, and where it holds another value
    (an array, a string), unless ``required`` (config.json and generation_config.json, which mlx-lm's load
    reads as objects): then a ValueError naming the file, so the model is refused at start rather than
    failing on every request."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if isinstance(value, dict):
        return value
    if required:
        raise ValueError(f"{path.name} is not a JSON object (it holds {json.dumps(value)[:60]})")
    return {}


def _model_sampling(gen: dict) -> dict:
    """What generation_config.json says to sample with: a temperature of 0 or more, a top_p in (0, 1], a top_k
    of 0 or more; a value of another type or out of range (a damaged file) is left out, said in the log (the
    request's own value, else the fallback, is used), as every request would otherwise fail on it."""
    def fits(key, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return False
        return 0 < value <= 1 if key == "top_p" else value >= 0 and (key != "top_k" or float(value).is_integer())

    sampling = {}
    for key, fallback in FALLBACK_SAMPLING.items():
        value = gen.get(key)
        if value is not None and not fits(key, value):
            log.warning("generation_config.json: %s %s is not a usable value: using %s", key, json.dumps(value),
                        fallback)
            value = None
        sampling[key] = fallback if value is None else (int(value) if key == "top_k" else value)
    return sampling


def answer_penalties(prompt_tokens: int, presence: float, frequency: float) -> Callable:
    """A logits processor for OpenAI's presence and frequency penalties: ``tokens`` (the prompt, then the
    answer so far) past the first ``prompt_tokens`` are what was sampled."""
    import mlx.core as mx

    def penalise(tokens, logits):
        sampled = tokens[prompt_tokens:]
        if sampled.size == 0:
            return logits
        counts = mx.zeros((logits.shape[-1],), dtype=mx.float32).at[sampled].add(1.0)
        return logits - (counts * frequency + (counts > 0) * presence).astype(logits.dtype)

    return penalise


PENALTY_BOUND = 1e30  # past float32's range a penalty is ±inf in the logits: every token it touches, the grammar's
# allowed ones included, would tie at -inf (and the draw would leave the grammar); at this bound it is already
# absolute and stays finite (Ollama sets no bound on its penalties)


def _bounded(value):
    return max(-PENALTY_BOUND, min(PENALTY_BOUND, value)) if isinstance(value, (int, float)) else value


# where configs say how many positions the model was trained for: most (Llama, Qwen, Gemma, Mistral …), then
# older or other architectures' names (GPT-2's n_positions, ChatGLM's seq_length …)
WINDOW_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "max_seq_len")
FALLBACK_WINDOW = 32768


def trained_window(config: dict, tokenizer, model_id: str) -> int:
    """The context window a model's config gives (``WINDOW_KEYS``), else its tokenizer's ``model_max_length``
    where that is a real length (transformers writes 1e30 for "none"), else ``FALLBACK_WINDOW``, said in the
    log: a window guessed silently would refuse or overrun prompts with no word why."""
    for key in WINDOW_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    length = getattr(tokenizer, "model_max_length", None)
    if isinstance(length, int) and 0 < length < 10_000_000:
        log.warning("%s: its config gives no context window (%s): using its tokenizer's model_max_length, %d",
                    model_id, ", ".join(WINDOW_KEYS), length)
        return length
    log.warning("%s: its config gives no context window (%s): assuming %d tokens", model_id,
                ", ".join(WINDOW_KEYS), FALLBACK_WINDOW)
    return FALLBACK_WINDOW


class MLXBackend(Backend):
    images_layout: str | None = None  # what makes an image's KV besides the weights (vision.py), for the disk cache

    def __init__(self, model_dir: str | Path, model_id: str | None = None, default_reasoning=None,
                 prompt_cache_bytes: int = DEFAULT_PROMPT_CACHE_MIB << 20, lazy: bool = False,
                 device: str | None = None, speculative: "SpeculativeConfig | None" = None, group=None):
        """The tokenizer loads at once (token counting and listing need no weights); the weights load now,
        or with ``lazy`` on first use (a catalog keeps one model resident at a time). ``device="cpu"``
        decodes on mlx's CPU stream even where its default device is the GPU (the ``<id>@cpu`` twin).
        ``speculative``: how its requests draft (speculative/speculator.py; default: prompt lookup)."""
        from mlx_lm.utils import load_tokenizer

        super().__init__()
        self.path = Path(model_dir)
        self.model_id = model_id or self.path.name
        self.default_reasoning = default_reasoning
        self.prompt_cache = PromptCache(prompt_cache_bytes)
        self.device = device
        self.group = group  # a group.Group: this process holds its rank's part of the model (group/ranks.py)
        self._stream = None
        self.speculative = speculative if speculative is not None else SpeculativeConfig()
        self._draft = None  # the draft model's proposers: a pool, one taken by each request drafting now
        config = read_json(self.path / "config.json", required=True)
        gen = read_json(self.path / "generation_config.json", required=True)  # (read before mlx-lm reads it)
        self.config = config
        self.tokenizer = load_tokenizer(self.path, eos_token_ids=config.get("eos_token_id"))
        vocab = self.tokenizer.get_vocab()
        for stop in self.family.stop_tokens + FIM_ENDS:  # the family's end-of-turn tokens, and an infill's, end it
            if stop in vocab and vocab[stop] not in self.tokenizer.eos_token_ids:
                self.tokenizer.add_eos_token(stop)
        text_config = config.get("text_config")
        text_config = text_config if isinstance(text_config, dict) else config
        self.context_window = trained_window(text_config, self.tokenizer, self.model_id)
        self.vocab_size = int(text_config.get("vocab_size") or 0)
        if isinstance(gen.get("context_window"), int) and gen["context_window"] > 0:  # tinytitan's key: an
            self.context_window = gen["context_window"]  # Ollama library's num_ctx (the config stays as trained)
        self.sampling = _model_sampling(gen)
        self.sampling.update({k: gen[k] for k in ("min_p", "repetition_penalty")
                              if isinstance(gen.get(k), (int, float)) and not isinstance(gen[k], bool)
                              and gen[k] != (1.0 if k == "repetition_penalty" else 0.0)})
        stops = gen.get("stop_strings") or ()  # transformers' own key: a string or a list of them
        self.default_stop = (stops,) if isinstance(stops, str) else tuple(s for s in stops if isinstance(s, str) and s)
        system = gen.get("system_prompt")  # tinytitan's key: a library's default system prompt (ollama_library.py)
        self.default_system = system if isinstance(system, str) and system else None
        self.default_history = tuple(Message(m["role"], m["content"]) for m in gen.get("default_messages") or ()
                                     if isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                                     and isinstance(m.get("content"), str))
        log.info("%s: %s model family", self.model_id, self.family.name)
        self.model = None
        self.load_seconds: float | None = None  # how long the last load took
        if not lazy:
            self.ensure_loaded()

    @property
    def weight_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.glob("*.safetensors"))

    @property
    def loaded(self) -> bool:
        return self.model is not None

    kv_bits: int | None = None  # --kv-bits: the KV cache quantized (mlx-lm's QuantizedKVCache), where it can be

    def new_cache(self, model) -> list:
        """A fresh KV cache for one request: mlx-lm's, quantized to ``kv_bits`` where asked (``check_kv_bits``)."""
        from mlx_lm.models.cache import make_prompt_cache

        kv = make_prompt_cache(model)
        if self.kv_bits is None:
            return kv
        return [c.to_quantized(group_size=self.kv_group_size(model), bits=self.kv_bits) for c in kv]

    @staticmethod
    def kv_group_size(model) -> int:
        args = getattr(model, "args", None)
        head = getattr(args, "head_dim", None) or (args.hidden_size // args.num_attention_heads if args else 0)
        return 64 if head % 64 == 0 else 32

    def check_kv_bits(self) -> None:
        """``--kv-bits`` where this model's caches allow it, else a ValueError naming why: every layer's cache must
        be mlx-lm's plain KVCache (sliding windows, recurrent state and chunked caches cannot be quantized), and
        the head width a multiple of a quantization group (32)."""
        if self.kv_bits is None:
            return
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        model = self.ensure_loaded()
        other = sorted({type(c).__name__ for c in make_prompt_cache(model) if type(c) is not KVCache})
        if other:
            raise ValueError(f"--kv-bits {self.kv_bits}: the KV caches of '{self.model_id}' ({', '.join(other)}) "
                             "cannot be quantized")
        args = getattr(model, "args", None)
        head = getattr(args, "head_dim", None) or (args.hidden_size // args.num_attention_heads if args else 0)
        if not head or head % 32:
            raise ValueError(f"--kv-bits {self.kv_bits}: the heads of '{self.model_id}' are {head} wide, not a "
                             "multiple of the 32-wide quantization group")

    batches = True  # the engine decodes its requests through the decoder's step, together (scheduler.py)

    def logits_processors(self, prepared: Prepared, loop: DecodeLoop) -> list:
        """The request's mlx-lm logits processors (the per-request hook: see engine.py); a grammar mask is
        handed to ``loop`` too (its own time goes to the turn's timing)."""
        from mlx_lm.sample_utils import make_logits_processors

        used = {k: _bounded(v) if k.endswith("_penalty") else v for k, v in prepared.sampling.items()}
        window = used.get("repeat_last_n")  # Ollama's repeat_last_n: 0 turns the penalties off, -1 is the context
        if window is None:
            # OpenAI's presence and frequency penalties count the tokens sampled so far in this answer, all of
            # them and nothing of the prompt (mu[j] - c[j] * frequency - (c[j] > 0) * presence)
            processors = make_logits_processors(repetition_penalty=used.get("repetition_penalty"))
            presence, frequency = used.get("presence_penalty") or 0.0, used.get("frequency_penalty") or 0.0
            if presence or frequency:
                processors.append(answer_penalties(len(prepared.tokens), presence, frequency))
        else:  # Ollama (llama.cpp): all three look back over the last ``window`` tokens, the prompt's included
            size = self.context_window if window < 0 else min(window, self.context_window)  # past it: the whole context
            processors = [] if window == 0 else make_logits_processors(
                repetition_penalty=used.get("repetition_penalty"),
                presence_penalty=used.get("presence_penalty") or None,
                frequency_penalty=used.get("frequency_penalty") or None,
                repetition_context_size=size, presence_context_size=size, frequency_context_size=size,
            )
        if used.get("logit_bias"):  # OpenAI's: added to the logits as they come, before any penalty scales them
            processors[:0] = make_logits_processors(logit_bias=dict(used["logit_bias"]))  # (mlx-lm's, vLLM's order)
        mask = prepared.logits_processor()
        if mask is not None:  # last: it sees the penalised logits, and nothing after it can revive a token
            loop.grammar_mask = mask
            processors.append(mask)
        return processors

    def sampler_for(self, prepared: Prepared, loop: DecodeLoop) -> tuple[Callable, list]:
        """The request's sampler (speculative/sampling.py: the one sampler every step uses — a lone row, a
        batch row, a verify) and its logits processors."""
        from ..speculative.sampling import row_sampler

        used = {**prepared.sampling, "top_k": self._top_k(prepared.sampling["top_k"])}
        return row_sampler(used, prepared.seed), self.logits_processors(prepared, loop)

    def speculator(self, prepared: Prepared, loop: DecodeLoop, tokens: list[int]) -> "Speculator | None":
        """The request's drafting (None: it decodes without drafts): prompt lookup over its prompt and answer,
        or the draft model."""
        config = self.speculative
        if not prepared.speculative or not config.on:
            return None
        common = dict(mask=loop.grammar_mask, eos=sorted(self.tokenizer.eos_token_ids))
        if self._draft is not None:
            proposer = self._draft.take(tokens)
            return Speculator.for_draft_model(proposer, tokens, config.num_draft_tokens,
                                              release=lambda: self._draft.give_back(proposer), **common)
        if config.lookup:
            return Speculator.for_lookup(tokens, config.num_draft_tokens, **common)
        return None

    @property
    def stream(self):
        """The mlx stream decoding runs on: None for mlx-lm's own (the default device); a group's one stream
        for a rank of a group (group/ranks.py)."""
        if self.group is not None:
            return self.group.stream
        if self.device != "cpu":
            return None
        import mlx.core as mx

        if self._stream is None:
            self._stream = mx.new_stream(mx.cpu)
        return self._stream

    def decode(self, prepared: Prepared, loop: DecodeLoop, should_stop: Callable[[], bool]) -> None:
        """One request alone, to its end: the decoder's step with one row (scheduler.py)."""
        from ..decode.scheduler import decode_one

        self.ensure_loaded()
        decode_one(self, prepared, loop, should_stop)

    def _top_k(self, k: int) -> int:
        """A top_k at or past the vocabulary keeps every token: that is 0 (off) to mlx-lm, which rejects it
        otherwise."""
        return 0 if self.vocab_size and k >= self.vocab_size else k

    def ensure_loaded(self):
        if self.model is None:
            import time

            import mlx.core as mx
            from mlx_lm.utils import load_model

            t0 = time.perf_counter()
            if self.group is not None:
                self.model = self.group.load(self.path)
                self._load_draft_or_unload()  # (rank 0's config alone names one: model_setup.py)
                self.load_seconds = time.perf_counter() - t0
                log.info("loaded rank %d's part of %s in %.1fs: %s", self.group.rank, self.model_id,
                         self.load_seconds, self.group.holds[self.group.rank])
                return self.model
            log.info("loading %s: %.1f MB of weights from %s …", self.model_id, self.weight_bytes / 1e6, self.path)
            model, _ = load_model(self.path, lazy=True)
            params = [p for _, p in _flat(model.parameters())]
            step = max(1, len(params) // 20)
            with Progress(log, f"loading {self.model_id}", sum(p.nbytes for p in params), unit="B",
                          ends=False) as shown:  # a bar on a terminal, a line every 2 s in a log
                for i in range(0, len(params), step):
                    mx.eval(params[i:i + step])
                    shown.update(sum(p.nbytes for p in params[i:i + step]))
            self.model = model
            if self.kv_bits is not None:  # a catalog's model: refused on its load, by name
                try:
                    self.check_kv_bits()
                except ValueError:
                    self.model = None
                    raise
            self._load_draft_or_unload()
            self.load_seconds = time.perf_counter() - t0
            log.info("loaded %s in %.1fs (context window %d tokens)", self.model_id, self.load_seconds,
                     self.context_window)
        return self.model

    def _load_draft_or_unload(self) -> None:
        """The draft model, or, when it cannot be loaded, no model at all: the engine counts a failed load as
        nothing resident (engine.py ``_make_resident``), so the weights must not stay behind (nor the next load
        find the model "loaded" and serve it without its draft model)."""
        try:
            self._load_draft()
        except BaseException:
            self.model = None
            self._draft = None
            raise

    def _load_draft(self) -> None:
        """The draft model ``--draft-model`` names, whole (on a group, rank 0 alone drafts), beside the model."""
        if self.speculative.draft_model is not None:
            from ..speculative.draft_model import DraftModelPool, load_draft_model

            log.info("loading the draft model %s", self.speculative.draft_model_name)
            self._draft = DraftModelPool(load_draft_model(self.speculative.draft_model, self.tokenizer,
                                                          self.speculative.draft_model_name))

    def unload(self) -> bool:
        """Drop the weights and every cached prefix; the tokenizer stays (token counting needs no model)."""
        import gc

        import mlx.core as mx

        had = self.model is not None
        self.model = None
        self._draft = None
        self.prompt_cache.clear()
        gc.collect()
        mx.clear_cache()
        return had

    def describe(self) -> dict:
        return {"id": self.model_id, **self.limits(), "path": str(self.path),
                "device": self.device or "default",
                "loaded": self.model is not None, "prompt_cache": self.prompt_cache.stats()}

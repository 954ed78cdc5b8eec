"""Drawing the tokens of a verify step: one draw per position, as the request would draw them one at a time.

Rules:
- This is the one sampler of the engine: a row alone, a batch row and a verify step all draw with it.
- A verify step samples several positions at once (after the last accepted token, and after each draft
  token). ``RowSampler`` draws each row from the request's own distribution (mlx-lm's chain: top-p, min-p,
  top-k, then a categorical draw at the temperature; argmax at temperature 0), so a token accepted because
  the model's own sample equals the draft is drawn exactly as decoding without drafting would draw it.
- A seeded request draws row i with the i-th key of its own chain (``mx.random.key(seed)``, split once per
  draw: what ``mx.random.seed(seed)`` then the process-wide key would give, and what the engine's seeded
  sampler gives a batch member); ``accept(n)`` moves the chain on by the n draws that were used, so the
  rejected rows' keys are drawn again for the positions that really come next. A seeded request gives the
  same tokens with drafting as without.
- An unseeded request draws all its rows from the process-wide key at once: the same distribution per row.
- Nothing here is evaluated: the draws join the forward pass's graph.
"""

from __future__ import annotations

# What a request samples with (``Prepared.sampling``), each a ``ChatRequest`` field of the same name: the
# request's value, else its model's (generation_config.json: backends/mlx.py), else the value here (for the
# first three, the model's fallback; for the others, off). A new sampling parameter is a ChatRequest field, a
# line here and its use (``RowSampler``, or a logits processor: backends/mlx.py), and the spec YAML of each
# protocol that takes it.
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 0,
            "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": None,
            "repeat_last_n": None, "logit_bias": ()}

# The draw scales the logits by 1/temperature in float32. A temperature below GREEDY_TEMPERATURE draws as greedy
# (vLLM's _SAMPLING_EPS): a vanishing one (below about 3.7e-38) would scale every logit to -inf, a draw of nothing.
# One above MAX_TEMPERATURE (Ollama sets no maximum) draws as that one, already uniform over the tokens kept: past
# about 1e38 the scale is 0, and a token the mask or top-p took away (-inf * 0 = nan) would be drawn.
GREEDY_TEMPERATURE = 1e-5
MAX_TEMPERATURE = 1e30


def is_greedy(temperature: float, top_p: float) -> bool:
    """Temperature 0 (or one too small to scale by) or a top_p of 0 (the nucleus of no mass): the argmax."""
    return temperature < GREEDY_TEMPERATURE or top_p <= 0


def row_sampler(sampling: dict, seed: int | None = None):
    """A generation's sampler from the values it samples with (``Prepared.sampling``): mlx-lm's shared
    ``greedy_sampler`` at temperature 0 (rows that all use it are sampled in one call in the batch), else a
    ``RowSampler`` — with a key chain of its own when the request has a seed. A top_p of 0 is the nucleus of
    no mass: the most likely token alone (as OpenAI, Anthropic and Ollama read it), which is greedy; mlx-lm
    reads 0 as "off", which would sample the whole vocabulary instead."""
    from mlx_lm.sample_utils import greedy_sampler

    if is_greedy(sampling["temperature"], sampling["top_p"]):
        return greedy_sampler
    return RowSampler(sampling["temperature"], sampling["top_p"], sampling["min_p"], sampling["top_k"], seed=seed)


class RowSampler:
    def __init__(self, temp: float = 0.0, top_p: float = 1.0, min_p: float = 0.0, top_k: int = 0,
                 seed: int | None = None, min_tokens_to_keep: int = 1):
        self.temp, self.top_p, self.min_p, self.top_k = float(temp), float(top_p), float(min_p), int(top_k)
        self.temp = min(self.temp, MAX_TEMPERATURE)
        self.min_tokens_to_keep = min_tokens_to_keep
        self.seed = None if seed is None or self.greedy else int(seed) % 2**64
        self._key = None
        self._after: list = []  # the chain's key after each row drawn last

    @property
    def greedy(self) -> bool:
        return is_greedy(self.temp, self.top_p)  # top_p 0: the most likely token alone

    def __call__(self, logprobs):
        """One token per row of ``logprobs`` (``[rows, vocab]``, normalised)."""
        import mlx.core as mx
        from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

        if self.greedy:
            return mx.argmax(logprobs, axis=-1)
        if 0 < self.top_p < 1.0:
            logprobs = apply_top_p(logprobs, self.top_p)
        if self.min_p != 0.0:
            logprobs = apply_min_p(logprobs, self.min_p, self.min_tokens_to_keep)
        if self.top_k > 0:
            logprobs = apply_top_k(logprobs, self.top_k)
        scaled = logprobs * (1.0 / self.temp)
        if self.seed is None:
            return mx.random.categorical(scaled)
        if self._key is None:
            self._key = mx.random.key(self.seed)
        key, draws, self._after = self._key, [], []
        for row in range(scaled.shape[0]):
            key, draw = mx.random.split(key)
            self._after.append(key)
            draws.append(mx.random.categorical(scaled[row:row + 1], key=draw))
        self._key = key
        return mx.concatenate(draws) if len(draws) > 1 else draws[0]

    def accept(self, rows: int) -> None:
        """The first ``rows`` draws of the last call were used: the chain goes on after them."""
        if self.seed is not None and 0 < rows <= len(self._after):
            self._key = self._after[rows - 1]
        self._after = []

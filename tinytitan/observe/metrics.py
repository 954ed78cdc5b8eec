"""Prometheus metrics (``GET /metrics``), with prometheus-client: one registry per server.

Counters and histograms move when a request ends (from its record); what the engine holds now (queue,
resident model, prompt cache) is read at scrape time by a collector, so it is never stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .state import engine_state

if TYPE_CHECKING:
    from .turn import Turn

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
TPS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
TOKEN_KINDS = ("prompt", "cached", "completion", "reasoning")


class Metrics:
    content_type = CONTENT_TYPE

    def __init__(self, engine: Any):
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("tinytitan_requests", "HTTP requests answered, by protocol, route and status",
                                ("protocol", "route", "status"), registry=self.registry)
        self.tokens = Counter("tinytitan_tokens", "Tokens of finished generations, by model and kind "
                              "(prompt, cached: the part of prompt read from the prompt cache, completion, "
                              "reasoning: the part of completion in the reasoning channel)",
                              ("model", "kind"), registry=self.registry)
        self.drafts = Counter("tinytitan_draft_tokens", "Speculative decoding: tokens drafted (prompt lookup, a "
                              "draft model) and verified, by model and kind (drafted; accepted: the part the model "
                              "sampled itself, each also counted once as completion)",
                              ("model", "kind"), registry=self.registry)
        self.draft_share = Histogram("tinytitan_draft_accepted_ratio", "Speculative decoding: the share of each "
                                     "turn's drafted tokens that was accepted (turns that drafted)", ("model",),
                                     buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0), registry=self.registry)
        self.ttft = Histogram("tinytitan_time_to_first_token_seconds", "From the request's arrival to its "
                              "first generated output", ("model",), buckets=TTFT_BUCKETS, registry=self.registry)
        self.decode_speed = Histogram("tinytitan_decode_tokens_per_second", "Decode speed of each generation "
                                      "(tokens after the first, per second)", ("model",), buckets=TPS_BUCKETS,
                                      registry=self.registry)
        self.cache_misses = Counter("tinytitan_prompt_cache_misses_by_reason", "Generations by why their prompt "
                                    "parted from the prompt cache, and lost cached tokens (see the README's reasons)",
                                    ("model", "reason"), registry=self.registry)
        self.registry.register(_EngineCollector(engine))

    def observe(self, turn: "Turn") -> None:
        self.requests.labels(turn.protocol, turn.route, str(turn.status)).inc()
        if not turn.generated or turn.model is None:
            return
        counts = (turn.prompt_tokens, turn.cached_tokens, turn.completion_tokens, turn.reasoning_tokens)
        for kind, n in zip(TOKEN_KINDS, counts):
            self.tokens.labels(turn.model, kind).inc(n)
        if turn.cache_reason not in (None, "hit"):  # a hit is no miss: counted by tinytitan_prompt_cache_hits
            self.cache_misses.labels(turn.model, turn.cache_reason).inc()
        t = turn.timing
        if t is not None and t.draft_tokens:
            self.drafts.labels(turn.model, "drafted").inc(t.draft_tokens)
            self.drafts.labels(turn.model, "accepted").inc(t.draft_accepted_tokens)
            self.draft_share.labels(turn.model).observe(t.draft_accepted_tokens / t.draft_tokens)
        if turn.ttft is not None:
            self.ttft.labels(turn.model).observe(turn.ttft)
        if turn.tokens_per_second is not None:
            self.decode_speed.labels(turn.model).observe(turn.tokens_per_second)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    """The engine's state at scrape time."""

    def __init__(self, engine: Any):
        self.engine = engine

    def collect(self):
        state = engine_state(self.engine)
        queue = state["queue"]
        yield GaugeMetricFamily("tinytitan_queue_waiting", "Generations admitted, not decoding yet (each "
                                "choice of a request counts, held for it from admission)", value=queue["waiting"])
        yield GaugeMetricFamily("tinytitan_queue_running", "Generations decoding now", value=queue["running"])
        yield GaugeMetricFamily("tinytitan_batch_size", "Generations in the running batch (decoding together, "
                                "or their prompt being read)", value=queue["batch"])
        yield GaugeMetricFamily("tinytitan_batch_limit", "Generations that may decode together (--max-batch)",
                                value=queue["max_batch"])
        yield GaugeMetricFamily("tinytitan_queue_limit", "Generations that may wait (--max-queue)",
                                value=queue["max_queue"])
        resident = GaugeMetricFamily("tinytitan_model_resident", "1 for the model whose weights are loaded",
                                     labels=("model",))
        load = GaugeMetricFamily("tinytitan_model_load_seconds", "How long the model's last load took",
                                 labels=("model",))
        cache = {name: GaugeMetricFamily(f"tinytitan_prompt_cache_{name}", text, labels=("model",))
                 for name, text in (("bytes", "Bytes of KV cache held for cached prompt prefixes"),
                                    ("max_bytes", "The prompt cache's byte budget (--prompt-cache-mib)"),
                                    ("entries", "Cached prompt prefixes"))}
        hits = CounterMetricFamily("tinytitan_prompt_cache_hits", "Prompts that reused a cached prefix",
                                   labels=("model",))
        misses = CounterMetricFamily("tinytitan_prompt_cache_misses", "Prompts that found no cached prefix",
                                     labels=("model",))
        disk = {name: GaugeMetricFamily(f"tinytitan_prompt_cache_disk_{name}", text, labels=("model",))
                for name, text in (("bytes", "Bytes of cached prompt prefixes on disk (--prompt-cache-dir)"),
                                   ("entries", "Cached prompt prefixes on disk"))}
        for m in state["models"]:
            resident.add_metric([m["id"]], 1.0 if m["resident"] else 0.0)
            if m["load_seconds"] is not None:
                load.add_metric([m["id"]], m["load_seconds"])
            stats = m["prompt_cache"]
            if stats is not None:
                for name, family in cache.items():
                    family.add_metric([m["id"]], stats[name])
                hits.add_metric([m["id"]], stats["hits"])
                misses.add_metric([m["id"]], stats["misses"])
                if stats.get("disk"):
                    for name, family in disk.items():
                        family.add_metric([m["id"]], stats["disk"][name])
        yield resident
        yield load
        yield from cache.values()
        yield from disk.values()
        yield hits
        yield misses

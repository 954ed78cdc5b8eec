"""The generation path: backends (MLX, scripted), output parsing into TokenEvents, the queue.

Nothing here imports a protocol: the engine sees a ChatRequest and yields TokenEvents.
"""

DEFAULT_STREAM_INTERVAL_MS = 50  # --stream-interval: a streamed answer's deltas, after the first, at most this
#                                 often (docs/performance.md: what a send costs beside the decode on 2 cores)
DEFAULT_MAX_BATCH = 8  # --max-batch: measured on the ~50M benchmark model (README, batching); here so the CLI
#                        can name it without importing the engine

"""The generation path: backends (MLX, scripted), output parsing into TokenEvents, the queue.

Nothing here imports a protocol: the engine sees a ChatRequest and yields TokenEvents.
"""

DEFAULT_MAX_BATCH = 8  # --max-batch: measured on the ~50M benchmark model (README, batching); here so the CLI
#                        can name it without importing the engine

"""The generation path: backends (MLX, scripted), output parsing into TokenEvents, the queue.

Nothing here imports a protocol: the engine sees a ChatRequest and yields TokenEvents.
"""

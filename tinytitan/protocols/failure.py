"""What a stream says when its events raise once the stream is open: the protocol's ``Failed`` event.

Rules:
- An ``ApiError`` is the request's refusal, whole: it keeps its kind, message and code (a model that will not load:
  ``model_load_failed``; a full queue: ``overloaded``), as the folded answer's error would. Anything else broke the
  generation, and says so as the engine says it in band (``Failed.in_generation``: "generation failed: …").
- One mapping for a lone answer's stream (``Protocol.sse_body``), for each choice of several (choices.py) and
  for a compaction turn's summary (compaction.py).
"""

from __future__ import annotations

from ..errors import ApiError
from ..events import Failed


def refusal_or_failure(exc: Exception) -> Failed:
    """The ``Failed`` event that ends a stream whose events raised ``exc``: an ``ApiError`` as the request's
    refusal, anything else as a broken generation. A generation that breaks after it started is the engine's
    ``Failed.in_generation`` (events.py), which keeps only a model's ``unavailable`` of an ``ApiError``."""
    if isinstance(exc, ApiError):
        return Failed(exc.message, type=exc.kind, code=exc.code)
    return Failed.in_generation(exc)

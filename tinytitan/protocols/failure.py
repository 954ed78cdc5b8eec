"""What a stream says when its generation raises once the stream is open: the protocol's ``Failed`` event.

Rules:
- An ``ApiError`` keeps its kind, message and code (a model that will not load: ``model_load_failed``), as the
  folded answer's error would; anything else is a ``server_error``, "generation failed: …".
- One mapping for a lone answer's stream (``Protocol.sse_body``) and for each choice of several (choices.py).
"""

from __future__ import annotations

from ..errors import ApiError
from ..events import Failed


def failure_of(exc: Exception) -> Failed:
    """The ``Failed`` event that ends a stream whose generation raised ``exc``."""
    if isinstance(exc, ApiError):
        return Failed(exc.message, type=exc.kind, code=exc.code)
    return Failed(f"generation failed: {exc}", type="server_error")

"""ApiError: bad input (or a refused feature), raised anywhere before or during a request.

``kind`` names an entry of the protocol spec's ``errors.kinds`` table (invalid_request, authentication,
permission, not_found, model_not_found, overloaded, not_implemented, server_error …); the spec decides
the status, the type string and the envelope the client sees. ``data`` carries what a protocol may word
its own way, as values (e.g. ``prompt_tokens`` and ``context_window`` of a prompt that does not fit), so
no protocol reads numbers back out of the English message.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, kind: str, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, data: dict | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.data = data or {}


# what loading a model's files raises where they are missing or damaged (mlx-lm, transformers, safetensors)
LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, RuntimeError, KeyError, TypeError)
try:  # transformers' strict config classes raise this (not a ValueError) for a config they refuse
    from huggingface_hub.errors import StrictDataclassError

    LOAD_ERRORS += (StrictDataclassError,)
except ImportError:  # an older huggingface_hub: its configs raise ValueError
    pass


def load_error_text(exc: BaseException, limit: int = 400) -> str:
    """A load error in one short line: mlx-lm names every missing parameter (hundreds of names for a wrong layer
    count), which would bury the start-up message; the head of it says what went wrong."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else f"{text[:limit]} … ({len(text)} characters)"


def invalid(message: str, param: str | None = None, code: str | None = None, data: dict | None = None) -> ApiError:
    return ApiError("invalid_request", message, param=param, code=code, data=data)

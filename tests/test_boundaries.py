"""The module boundaries, checked on the source: a protocol never imports the web framework, the server or
engine internals (it is handed a Call and the engine's public API, and answers a Reply); the engine never
imports a protocol."""

from __future__ import annotations

import pytest

from source_imports import PACKAGE, imports

# what a protocol may name for type hints only: the engine's public face
PUBLIC_ENGINE = {"tinytitan.engine.engine", "tinytitan.engine.summarise"}


@pytest.mark.parametrize("path", sorted((PACKAGE / "protocols").glob("*.py")), ids=lambda p: p.name)
def test_protocols_see_no_framework_server_or_engine_internals(path):
    for module, type_only in imports(path):
        root = module.split(".")[0]
        assert root not in ("quart", "quart_trio", "werkzeug", "hypercorn"), f"{path.name} imports {module}"
        assert not module.startswith("tinytitan.http"), f"{path.name} imports the server ({module})"
        if module.startswith("tinytitan.engine"):
            assert type_only and module in PUBLIC_ENGINE, f"{path.name} imports engine internals ({module})"


@pytest.mark.parametrize("path", sorted((PACKAGE / "engine").rglob("*.py")), ids=lambda p: p.name)
def test_the_engine_never_imports_a_protocol(path):
    for module, _ in imports(path):
        assert not module.startswith(("tinytitan.protocols", "tinytitan.http")), f"{path.name} imports {module}"


def test_every_chat_request_field_is_read_by_the_engine():
    """A field a spec maps into the ChatRequest (``to:``, ``derive``) must change what the engine does: each
    ChatRequest field is read somewhere in the engine (or the memory layer that decorates it), so a mapping
    into a field nothing reads cannot hide."""
    import dataclasses
    import re

    from tinytitan.chat_request import ChatRequest

    from tinytitan.engine.speculative.sampling import SAMPLING

    source = "\n".join(p.read_text() for d in ("engine", "memory") for p in (PACKAGE / d).rglob("*.py"))

    def read(name: str) -> bool:
        if re.search(rf"\.{name}\b", source):
            return True
        # a sampling value: the request's is taken by its name in SAMPLING (prepare.py's sampling_for); its name
        # must come again, quoted, somewhere in the engine besides the table (where the value is used, unless a
        # model default is read by the same name: a looser check than for the other fields)
        return name in SAMPLING and len(re.findall(rf"[\"']{name}[\"']", source)) >= 2

    unread = [f.name for f in dataclasses.fields(ChatRequest) if not read(f.name)]
    assert not unread, f"ChatRequest fields the engine never reads: {unread}"


def test_every_sampling_value_is_a_chat_request_field():
    """``Prepared.sampling`` takes each value of the sampling table from the request field of the same name."""
    import dataclasses

    from tinytitan.chat_request import ChatRequest
    from tinytitan.engine.speculative.sampling import SAMPLING

    assert set(SAMPLING) <= {f.name for f in dataclasses.fields(ChatRequest)}

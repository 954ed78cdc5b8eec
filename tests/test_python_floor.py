"""The Python the package declares (pyproject's ``requires-python``) is the Python it runs on.

mlx-lm 0.32 — the version the families' parsers and the prompt cache are tested against — requires
Python 3.11, so 3.11 is the floor. These tests hold the declaration to the facts: no dependency asks for
more than the floor, no module is written in syntax newer than it, and the package imports and serves on
the floor interpreter (the one CI runs; elsewhere a ``python3.11`` on PATH).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from cli_helpers import end_process
from conftest import absent
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def floor() -> tuple[int, int]:
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)", PROJECT["requires-python"].strip())
    assert m, f"requires-python should be a plain floor, not {PROJECT['requires-python']!r}"
    return int(m.group(1)), int(m.group(2))


def test_no_dependency_needs_a_newer_python_than_the_floor():
    version = "%d.%d.0" % floor()
    too_new = []
    for line in PROJECT["dependencies"]:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            needs = distribution(req.name).metadata["Requires-Python"]
        except PackageNotFoundError:
            continue
        if needs and version not in SpecifierSet(needs):
            too_new.append(f"{req.name} requires Python {needs}")
    assert not too_new, f"requires-python {PROJECT['requires-python']} is below what {too_new} allow"


def test_every_module_is_written_for_the_floor():
    newer = []
    for path in sorted((ROOT / "tinytitan").rglob("*.py")):
        try:
            ast.parse(path.read_text(), str(path), feature_version=floor())
        except SyntaxError as exc:
            newer.append(f"{path.relative_to(ROOT)}:{exc.lineno}: {exc.msg}")
    assert not newer, newer


def floor_interpreter() -> str | None:
    if sys.version_info[:2] == floor():
        return sys.executable
    return shutil.which("python%d.%d" % floor())


def test_the_package_imports_and_serves_on_the_floor_interpreter(tmp_path):
    python = floor_interpreter()
    if python is None:
        absent("no Python %d.%d on PATH to test the declared floor on" % floor())
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Hello from the floor."]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([python, "-m", "tinytitan", "serve", "--script", str(script), "--port", "0",
                             "--responses-store", "memory"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines, base = [], None
        deadline = time.monotonic() + 120
        while base is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"is serving '[^']+' at (http://\S+)", line)
            base = m.group(1) if m else None
        assert base, "serve did not start:\n" + "".join(lines)
        version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert version == "%d.%d" % floor()
        body = json.dumps({"model": "tinytitan-scripted", "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(base + "/v1/chat/completions", body.encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            answer = json.loads(r.read())
        assert answer["choices"][0]["message"]["content"] == "Hello from the floor."
    finally:
        end_process(proc)

"""What a server's start imports: a package only some servers use is imported by those alone (psycopg where the
state database is PostgreSQL, httpx where ``--fetch-images`` is on), not at every start (each was about a tenth
of a second of it: ``python tools/bench_startup.py --importtime 20``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WATCHED = ("psycopg", "httpx")

# ``tinytitan serve`` as ``python -m tinytitan`` runs it, which says at its banner which watched packages it holds
BOOT = r"""
import os, sys
import tinytitan.serve as serve

watched = set(sys.argv[1].split(","))

def banner(*args, **kwargs):
    held = sorted({m.split(".")[0] for m in sys.modules} & watched)
    print("IMPORTED", *held, flush=True)
    os._exit(0)

serve.banner = banner
from tinytitan.cli import main
sys.exit(main(sys.argv[2:]))
"""


def imported_at_start(tmp_path: Path, *args: str) -> list[str]:
    script = tmp_path / "s.yaml"
    script.write_text('["ok"]')
    done = subprocess.run([sys.executable, "-c", BOOT, ",".join(WATCHED), "serve", "--script", str(script),
                           "--port", "0", "--state", str(tmp_path / "state"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("IMPORTED")]
    assert lines, (done.returncode, done.stderr[-3000:])
    return lines[0].split()[1:]


def test_a_server_on_a_sqlite_state_imports_neither_psycopg_nor_httpx(tmp_path):
    assert imported_at_start(tmp_path) == []  # (the SQLite database and the Responses store are open by then)


def test_fetching_images_imports_httpx(tmp_path):
    assert imported_at_start(tmp_path, "--fetch-images") == ["httpx"]

"""A real PostgreSQL server for the tests, started by them: Debian's ``postgresql`` package (``initdb`` and
``pg_ctl``, run as the ``postgres`` user when the tests run as root), listening on a unix socket in a temporary
directory only (no TCP). One server per test session; each test gets a database of its own.

The fixtures ``pg`` (a server for each module that imports it) and ``state`` (where servers keep
their state: a SQLite directory, or a new PostgreSQL database), for the modules that import them by name."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import absent


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(f"{d}/pg_ctl") and os.path.exists(f"{d}/initdb"):
            return Path(d)
    return None


class PgServer:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="tt-pg-"))
        self.data, self.socket = self.root / "data", self.root / "sock"
        self.as_postgres = os.geteuid() == 0  # postgres refuses to run as root
        self.user = "postgres" if self.as_postgres else None
        self.socket.mkdir()
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket, "postgres")
        self.run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self.run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l", str(self.root / "log"), "-o",
                 f"-k {self.socket} -c listen_addresses='' -c fsync=on -c max_connections=200", "start")

    def run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = (self.root / "log").read_text() if (self.root / "log").exists() else ""
            raise RuntimeError(f"{tool} failed: {done.stdout}\n{done.stderr}\n{log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.socket}"

    def new_database(self) -> str:
        import psycopg

        name = "tt_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def pg():
    bindir = binaries()
    if bindir is None:
        absent("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        absent("psycopg is not installed: pip install 'psycopg[binary]'")
    server = PgServer(bindir)
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request, tmp_path):
    """Where the servers keep their state: a directory (SQLite), or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state")
    return request.getfixturevalue("pg").new_database()

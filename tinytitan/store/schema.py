"""The tables, for both dialects: stored responses and their items, memory records and their full-text index,
memory workspaces, pending consolidation transcripts, conversations' memory fragments. ``create`` is idempotent
and safe to run from several processes at once (PostgreSQL: under an advisory lock; SQLite: inside the opener's
IMMEDIATE transaction)."""

from __future__ import annotations

VERSION = 1

_COMMON = [
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        previous_response_id TEXT,
        created_at BIGINT NOT NULL,
        stored_at DOUBLE PRECISION NOT NULL,
        size BIGINT NOT NULL,
        events TEXT NOT NULL,
        extra TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at, stored_at)",
    # kind 0: an input item (its own, in the order sent), 1: an output item
    """CREATE TABLE IF NOT EXISTS response_items (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        kind SMALLINT NOT NULL,
        position INTEGER NOT NULL,
        item_id TEXT,
        body TEXT NOT NULL,
        PRIMARY KEY (response_id, kind, position))""",
    "CREATE INDEX IF NOT EXISTS response_items_item ON response_items (item_id)",
    """CREATE TABLE IF NOT EXISTS memory_workspaces (
        scope TEXT PRIMARY KEY,
        path TEXT,
        created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS memory_transcripts (
        scope TEXT PRIMARY KEY,
        path TEXT NOT NULL,
        model TEXT NOT NULL,
        transcript TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS memory_transcripts_at ON memory_transcripts (at)",
    # the bootstrap fragment a conversation (its opening's digest) was first shown: its later turns, on any
    # server and after a restart, are shown the same (memory/service.py)
    """CREATE TABLE IF NOT EXISTS memory_fragments (
        scope TEXT NOT NULL,
        opening TEXT NOT NULL,
        fragment TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (scope, opening))""",
    "CREATE INDEX IF NOT EXISTS memory_fragments_at ON memory_fragments (at)",
]

# a memory record: ``words`` is its key as words (for the index), ``tags`` its tags as " a b "
_RECORD = """scope TEXT NOT NULL, key TEXT NOT NULL, words TEXT NOT NULL, value TEXT NOT NULL,
        importance INTEGER NOT NULL, confidence DOUBLE PRECISION, tags TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL"""

_SQLITE = [
    f"CREATE TABLE IF NOT EXISTS memory_records (id INTEGER PRIMARY KEY, {_RECORD}, UNIQUE (scope, key))",
    # external content: the index holds the words, memory_records the rows; triggers keep them in step
    """CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(words, tags, value, content='memory_records',
        content_rowid='id')""",
    """CREATE TRIGGER IF NOT EXISTS memory_records_ai AFTER INSERT ON memory_records BEGIN
        INSERT INTO memory_fts (rowid, words, tags, value) VALUES (new.id, new.words, new.tags, new.value); END""",
    """CREATE TRIGGER IF NOT EXISTS memory_records_ad AFTER DELETE ON memory_records BEGIN
        INSERT INTO memory_fts (memory_fts, rowid, words, tags, value)
        VALUES ('delete', old.id, old.words, old.tags, old.value); END""",
    """CREATE TRIGGER IF NOT EXISTS memory_records_au AFTER UPDATE ON memory_records BEGIN
        INSERT INTO memory_fts (memory_fts, rowid, words, tags, value)
        VALUES ('delete', old.id, old.words, old.tags, old.value);
        INSERT INTO memory_fts (rowid, words, tags, value) VALUES (new.id, new.words, new.tags, new.value); END""",
]

_POSTGRESQL = [
    f"""CREATE TABLE IF NOT EXISTS memory_records (id BIGSERIAL PRIMARY KEY, {_RECORD},
        tsv tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('simple', words), 'A') || setweight(to_tsvector('simple', tags), 'B')
            || setweight(to_tsvector('simple', value), 'D')) STORED,
        UNIQUE (scope, key))""",
    "CREATE INDEX IF NOT EXISTS memory_records_tsv ON memory_records USING GIN (tsv)",
]


def create(tx) -> None:
    if tx.dialect == "postgresql":
        tx.exec("SELECT pg_advisory_xact_lock(7261636)")  # one creator at a time
    for sql in _COMMON + (_POSTGRESQL if tx.dialect == "postgresql" else _SQLITE):
        try:
            tx.exec(sql)
        except Exception as exc:
            if "fts5" in str(exc).lower():  # a Python built against a SQLite without full-text search
                import sqlite3

                raise RuntimeError(f"this Python's SQLite ({sqlite3.sqlite_version}) has no FTS5 full-text search, "
                                   "which memory recall needs: use a Python whose sqlite3 has it (python.org "
                                   "builds and Debian's do), or --state postgresql://…") from None
            raise
    tx.exec("INSERT INTO meta (name, value) VALUES ('schema', ?) ON CONFLICT (name) DO NOTHING", (VERSION,))
    tx.exec("INSERT INTO meta (name, value) VALUES ('response_bytes', 0) ON CONFLICT (name) DO NOTHING")
    found = tx.row("SELECT value FROM meta WHERE name = 'schema'")[0]
    if found > VERSION:
        raise RuntimeError(f"the state database has schema version {found}, newer than this tinytitan's "
                           f"({VERSION}): upgrade tinytitan")

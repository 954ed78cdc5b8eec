"""Agent memory: durable facts a model writes in one conversation and reads in another, scoped to the
workspace (repository) being worked on, run by the server as memory tools (``--memory``).

- ``keys``: key and scope-part parsing (refusals by name).
- ``records``: a memory record and the checks on what is written.
- ``workspace``: one workspace's memory, as rows of the state database (tinytitan/store/db.py), with ranked
  full-text search.
- ``migrate``: older NDJSON journals, moved into the database.
- ``scope``: which workspace a request belongs to.
- ``fragment``: the bootstrap text added to the system prompt.
- ``tools``: the memory tool definitions and their executor.
- ``service``: the server's memory database and per-request sessions.
- ``layer``: the engine decorator that runs memory calls and continues the generation.
- ``consolidate``: quiet conversations' lasting facts, written by the model between requests.
- ``cli``: ``tinytitan memory …``, to see and correct what memory holds.

Without memory on, the layer is never constructed: no database is opened for it, no request is touched.
"""

"""Agent memory: durable facts a model writes in one conversation and reads in another, scoped to the
workspace (repository) being worked on, run by the server as memory tools (``--memory``).

- ``keys``: key and scope-part parsing (refusals by name).
- ``journal``: one workspace's event-sourced NDJSON journal and the state its replay builds.
- ``scope``: which workspace a request belongs to.
- ``fragment``: the bootstrap text added to the system prompt.
- ``tools``: the memory tool definitions and their executor.
- ``service``: the server's journals and per-request sessions.
- ``layer``: the engine decorator that runs memory calls and continues the generation.
- ``consolidate``: quiet conversations' lasting facts, written by the model between requests.
- ``cli``: ``tinytitan memory …``, to see and correct what memory holds.

Without memory on, the layer is never constructed: no journal is opened, no request is touched.
"""

"""``tinytitan launch AGENT [-- AGENT_ARGS]``: serve the model, then run a coding agent set up for it.

Rules:
- The agent gets everything it must know about the served model on this invocation only: environment
  variables, command-line flags and overrides (Codex's ``-c``), or a configuration file of launch's own under
  ``<cache>/launch/<agent>/`` that the agent is pointed at by a variable or a flag. The user's own configuration
  files (``~/.claude``, ``~/.codex/config.toml``, ``~/.pi``, ``~/.qwen``, ``opencode.json``, ``.aider*``) are
  never written.
- A server already running on the port for the model is reused (``/health``, then ``/v1/models``); otherwise
  one is started, in a session of its own (the terminal's Ctrl-C belongs to the agent), and stopped when the
  agent exits.
- Before the agent starts, its first prompt is checked against the model's window (``fit.py``); when it cannot
  fit, launch says so and offers the ``-fast`` model (chat only: no tools, no system prompt) or a larger
  ``--context-window``.
- ``--print`` shows what would run, and runs nothing but, when no server is up, a short-lived one that tells
  the model's window; launch's own files are written, so the printed line works as it is.

``agents.py`` says what each agent is given (a pure function of the served model), ``server.py`` finds or starts
the server, ``fit.py`` holds the first-prompt sizes, ``command.py`` is the command.
"""

"""The bootstrap fragment: what memory is, how to use it, and what it holds — added to the system prompt.

Rules:
- It lists keys with one-line summaries (at most 200 characters each), never whole values, most important
  first and, among equals, the older fact first; at most ``max_records`` entries and ``max_bytes`` bytes of
  listing (60 and 16 KiB by default). What does not fit is counted, not shown.
- It says which tools there are; with none, that there are none and that what memory holds is shown here.
- When memory is not saved (the database cannot be opened) it says that writes will not outlive the session.
"""

from __future__ import annotations

from .workspace import Workspace

MAX_RECORDS = 60
MAX_BYTES = 16 * 1024

ABOUT = """# Memory
You have a memory that outlives this conversation, kept by the server for this workspace ({name}).
- Read it when earlier work may help: why code is the way it is, what was tried and abandoned, how to build
  and test here, quirks of this machine.
- Write down durable facts a later session would need: decisions and their reasons, failed approaches,
  commands that work. Use path-like keys (`build/command`, `decisions/cache-layout`); the first line of a
  value is its summary.
- Do not store secrets, credentials or personal data, nor what the code or its history already says, nor
  the passing state of this conversation.
- A memory may be stale: verify it against the code before you rely on it, and correct or delete it when
  it is wrong."""

TOOLS = "Memory tools: {names}. They run on the server; their calls are not shown to the user."
NO_TOOLS = ("There are no memory tools in this session: you cannot read or write memory, and what it holds "
            "is already shown below.")
NOT_SAVED = "Memory is not saved in this session ({why}): what you write will not outlive it."


def listing(workspace: Workspace, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES) -> tuple[list[str], int]:
    """The lines that fit, and how many records did not."""
    ranked = workspace.ranked(max_records, brief=True)
    lines: list[str] = []
    size = 0
    for rec in ranked:
        line = f"- {rec.key} (importance {rec.importance}): {rec.summary}"
        n = len(line.encode("utf-8", "replace")) + 1
        if size + n > max_bytes:
            break
        lines.append(line)
        size += n
    return lines, workspace.count() - len(lines)


def bootstrap(workspace: Workspace, workspace_name: str, tool_names: tuple[str, ...], max_records: int = MAX_RECORDS,
              max_bytes: int = MAX_BYTES) -> str:
    parts = [ABOUT.format(name=workspace_name)]
    parts.append(TOOLS.format(names=", ".join(tool_names)) if tool_names else NO_TOOLS)
    if not workspace.persistent:
        parts.append(NOT_SAVED.format(why=workspace.why_not or "no database"))
    lines, hidden = listing(workspace, max_records, max_bytes)
    if lines:
        parts.append("What memory holds (key, importance: summary):\n" + "\n".join(lines))
        if hidden:
            parts.append(f"({hidden} more not shown" + ("; find them with memory_search or memory_list)"
                                                         if "memory_search" in tool_names else ")"))
    else:
        parts.append("Memory is empty for this workspace.")
    return "\n\n".join(parts)

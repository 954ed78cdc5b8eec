"""Which memory a request reads and writes: the scope ``<namespace>/<user>/<workspace>``.

Rules:
- The workspace is a directory, taken from (in order) the ``X-TinyTitan-Workspace`` header, the working
  directory the client declares in a *system* message (one sent mid-conversation too: Claude Code 2.1.332's;
  its ``Working directory: /path`` or ``- Primary working directory: /path`` line, Codex's ``<cwd>/path</cwd>``
  element; Codex sends its ``<environment_context>`` as a turn of its own with the user role, which counts
  too), else the directory the server was launched in. Only absolute paths count; they are normalised (``..``
  folded), never resolved against the filesystem.
- The home directory, its parent and ``/`` are refused as workspaces (too broad to be one project): that source
  is skipped, and the refusal logged. When every source is refused there is no memory for the request.
- The header is the client's own statement: one that cannot be used (not an absolute path, or refused as above)
  is ``HeaderRefused``, the client's 400 naming it, never a silent fall back to another source (two agents that
  name their workspaces ``frontend`` and ``backend`` would share the launch directory's memory).
- The workspace id is the directory's name (made safe) plus 12 hex digits of the SHA-256 of its full path:
  two checkouts named alike do not share memory.
- The scope comes from the request's session, never from a tool's arguments.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from ..chat_request import ChatRequest
from .keys import Refused, parse_segment

log = logging.getLogger("tinytitan.memory")

NAMESPACE = "tinytitan"
HEADER = "x-tinytitan-workspace"

# Claude Code: "Working directory: /p" (its <env> block), "- Primary working directory: /p" (2.1.x's Environment list)
_CLAUDE_CWD = re.compile(r"^[ \t]*(?:[-*][ \t]+)?(?:Primary working directory|Working directory):[ \t]*(\S[^\r\n]*?)[ \t]*$",
                         re.M)
_CODEX_CWD = re.compile(r"<cwd>\s*([^<\r\n]+?)\s*</cwd>")
_CODEX_CONTEXT = "<environment_context>"
# a system message sent mid-conversation reaches a ChatRequest as a user turn that is one such block (the
# protocols' place_system): Claude Code 2.1.332 sends its "# Environment" list that way, after the first question
_REMINDER = ("<system-reminder>", "</system-reminder>")


class HeaderRefused(ValueError):
    """The ``X-TinyTitan-Workspace`` header names no usable workspace; the message says why."""


@dataclass(frozen=True)
class Scope:
    namespace: str
    user: str
    workspace: str  # the id: name-digest
    path: str  # the directory it was derived from

    @property
    def parts(self) -> tuple[str, str, str]:
        return self.namespace, self.user, self.workspace

    def __str__(self) -> str:
        return "/".join(self.parts)


def default_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tinytitan" / "memory"


def os_user() -> str:
    try:
        name = getpass.getuser()
    except Exception:  # no login name (a container without passwd entry)
        name = str(os.getuid())
    try:
        return parse_segment(name, "user")
    except Refused:
        return "u" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:12]


def workspace_id(path: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", posixpath.basename(path)).lstrip(".")[:48] or "root"
    digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name}-{digest}"


def refused_workspace(path: str, home: str | None = None) -> str | None:
    """Why ``path`` (normalised, absolute) cannot be a workspace; None when it can."""
    home = posixpath.normpath(home or os.path.expanduser("~"))
    if path == "/":
        return "it is the filesystem root"
    if path == home:
        return "it is the home directory"
    if path == posixpath.dirname(home):
        return "it is the parent of the home directory"
    return None


def normalise(raw: object) -> str | None:
    """An absolute path, normalised; None for anything else (relative, empty, control characters)."""
    if not isinstance(raw, str):
        return None
    raw = raw.strip()
    if not raw.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in raw):
        return None
    return posixpath.normpath(raw).replace("//", "/")


def declared_in_system(req: ChatRequest) -> str | None:
    """The working directory a client states in its system messages (the first one found; a system message sent
    later in the conversation, which arrives as a user turn that is one ``<system-reminder>`` block, too), or in
    Codex's environment-context turn: a user message that is nothing but an ``<environment_context>`` block (Codex sends
    its context as one; what a user types or a tool returns elsewhere is never read)."""
    for m in req.messages:
        text = m.content.strip()
        if m.role == "system" or (m.role == "user" and text.startswith(_REMINDER[0]) and text.endswith(_REMINDER[1])
                                  and text.count(_REMINDER[0]) == 1):
            patterns = (_CLAUDE_CWD, _CODEX_CWD)
        elif m.role == "user" and m.content.lstrip().startswith(_CODEX_CONTEXT):
            patterns = (_CODEX_CWD,)
        else:
            continue
        for pattern in patterns:
            found = pattern.search(m.content)
            if found:
                return found.group(1)
    return None


def derive(req: ChatRequest, launch_dir: str, namespace: str = NAMESPACE, user: str | None = None,
           home: str | None = None) -> Scope | None:
    sources = (("header", req.workspace), ("system message", declared_in_system(req)), ("launch directory",
                                                                                        launch_dir))
    for source, raw in sources:
        if raw is None:
            continue
        path = normalise(raw)
        if source == "header" and path is None:
            raise HeaderRefused("X-TinyTitan-Workspace must be the workspace directory's absolute path "
                                "(e.g. /home/me/src/project)")
        if path is None:
            log.warning("memory: the workspace from the %s is not an absolute path; ignored", source)
            continue
        why = refused_workspace(path, home)
        if why and source == "header":
            raise HeaderRefused(f"X-TinyTitan-Workspace {path!r} cannot be a workspace: {why}, too broad to be "
                                "one project; name the project's directory")
        if why:
            log.warning("memory: the workspace from the %s is refused (%s); trying the next source", source, why)
            continue
        return Scope(namespace, user or os_user(), workspace_id(path), path)
    log.warning("memory: no usable workspace for this request; it runs without memory")
    return None

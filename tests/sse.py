"""Reading server-sent events in tests."""

from __future__ import annotations

import json


def parse_sse(text: str) -> list[tuple[str | None, object]]:
    """``event:``/``data:`` blocks → [(event name or None, parsed JSON or the raw string)]."""
    out = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        raw = "\n".join(data)
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.append((name, value))
    return out

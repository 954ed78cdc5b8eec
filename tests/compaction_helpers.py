"""Helpers for the compaction tests: a short coding history to compact, a summary that fits, and the payload a
compaction item carries (its encrypted_content, decoded)."""

from __future__ import annotations

import base64
import json


HISTORY = [
    {"type": "message", "role": "user", "content": "Fix the bug in src/app.py please."},
    {"type": "message", "role": "assistant", "content": "Looking at it."},
    {"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": '{"cmd": "cat src/app.py"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "def main(): retrun 1"},
]
SHORT = "Requirements: fix src/app.py. Next step: correct `retrun`."


def payload(item) -> dict:
    return json.loads(base64.b64decode(item["encrypted_content"]))

"""Responses truncation's test helpers: a history of many tool-calling turns and a newest question, and a server
on a recording scripted backend with a small context window (WINDOW), whose one answer is 'Fine.'."""

from __future__ import annotations

from backends import Recording
from tinytitan.engine.backends.scripted import ScriptEntry


MODEL = "tinytitan-scripted"
WINDOW = 600


def history(turns: int) -> list[dict]:
    items = []
    for k in range(turns):
        items += [{"type": "message", "role": "user", "content": f"question {k}: " + "lorem ipsum " * 20},
                  {"type": "function_call", "call_id": f"c{k}", "name": "look", "arguments": '{"k": %d}' % k},
                  {"type": "function_call_output", "call_id": f"c{k}", "output": f"result {k}"},
                  {"type": "message", "role": "assistant", "content": f"answer {k}"}]
    return items + [{"type": "message", "role": "user", "content": "the newest question"}]


async def server(serve, demo_tok):
    backend = Recording([ScriptEntry("Fine.")], demo_tok, model_id=MODEL, context_window=WINDOW)
    return await serve(backend=backend), backend


TOOLS = [{"type": "function", "name": "look", "parameters": {"type": "object"}}]

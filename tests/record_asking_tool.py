"""tools/record_asking.py (what tools/record_proxy.py, a standalone script, changes in a forwarded request)
loaded as a module for the tests."""

from __future__ import annotations


def load_record_asking():
    """tools/record_asking.py (what record_proxy.py, a standalone script, changes in a forwarded request) as a
    module, beside the modules it imports as the proxy does."""
    import importlib
    import sys
    from pathlib import Path

    tools = str(Path(__file__).resolve().parent.parent / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module("record_asking")

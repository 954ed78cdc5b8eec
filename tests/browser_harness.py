"""Headless chromium for the browser tests (Debian's, driven by the playwright package; .ci/run installs both):
CHROMIUM, its path; FLAGS, its command line; sync_api, playwright's (None when it is not installed); and
in_a_browser, the mark of a test that needs both (skipped without them, failed under CI=true)."""

from __future__ import annotations

import os
import shutil

from conftest import needs

CHROMIUM = os.environ.get("TINYTITAN_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

try:
    from playwright import sync_api
except ImportError:
    sync_api = None
# the browser tests need both; the others (the feed's guards, the page's own contents) run without them
NO_BROWSER = ("the playwright package is not installed (.ci/run installs it)" if sync_api is None else
              None if shutil.which(CHROMIUM) else f"no chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
in_a_browser = needs(NO_BROWSER is not None, reason=NO_BROWSER or "")

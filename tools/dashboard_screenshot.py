"""The documentation's dashboard screenshot (docs/dashboard.png, shown on docs/operating.md): ``tinytitan serve`` on the demo model, a short
session through each protocol (follow-up turns reuse the prompt cache), the page in headless chromium.

    python tools/dashboard_screenshot.py [--out docs/dashboard.png]

Needs the test extras (openai, anthropic, playwright) and Debian's chromium (``.ci/run`` installs them).
Run it when the page changes; tests/test_docs.py runs it too, so the command keeps working.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, ensure_model, start_tinytitan  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def session(base: str, model: str) -> None:
    import anthropic
    import openai

    oa = openai.OpenAI(base_url=base + "/v1", api_key="local", max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key="local", max_retries=0)
    system = "You are a careful coding assistant. " * 40
    chat = [{"role": "system", "content": system}, {"role": "user", "content": "Explain the bug in main.py."}]
    for turn in range(3):
        reply = oa.chat.completions.create(model=model, messages=chat, max_tokens=48, seed=turn)
        chat += [{"role": "assistant", "content": reply.choices[0].message.content or ""},
                 {"role": "user", "content": f"And now step {turn + 2}?"}]
    msgs = [{"role": "user", "content": "Plan the refactor of the parser. " * 10}]
    for turn in range(2):
        reply = an.messages.create(model=model, system=system, max_tokens=40, messages=msgs)
        msgs += [{"role": "assistant", "content": reply.content[0].text if reply.content else "ok"},
                 {"role": "user", "content": "Continue."}]
    for _ in oa.completions.create(model=model, prompt="def parse(text):\n", max_tokens=24, stream=True):
        pass
    oa.responses.create(model=model, input="Summarise the change in one line.", max_output_tokens=32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "dashboard.png"))
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as logs:
        server = start_tinytitan(ensure_model("demo"), Path(logs), ["--prompt-cache-mib", "256",
                                                                     "--model-id", "tinytitan-demo"])
        base = f"http://127.0.0.1:{server.port}"
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=FLAGS)
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(base + "/dashboard")
                page.wait_for_selector("#conn.live")
                session(base, server.model_id)
                page.locator("#requests tr.request").nth(6).wait_for()  # (no JS predicates: the CSP forbids eval)
                page.wait_for_timeout(300)
                page.screenshot(path=args.out, full_page=True)
                browser.close()
        finally:
            server.stop()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

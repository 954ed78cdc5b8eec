"""In a real browser (the dashboard tests' chromium): a page from another site cannot use the server — it reads
no answer over fetch nor over a WebSocket, and a "simple" text/plain POST it fires runs no generation — while the
same page from a loopback origin can, and the dashboard still works. The other site is ``evil.example``, which
chromium is told resolves to 127.0.0.1 (``--host-resolver-rules``): a name that is not loopback, as a real
attacker's page is, without leaving the machine."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trio

from browser_harness import CHROMIUM, FLAGS, in_a_browser, sync_api

MODEL = "tinytitan-scripted"
ANSWER = "The secret answer."
# what a page does with the server's address (run by page.evaluate): each way of reading an answer
PROBE = """async (base) => {
  const out = {};
  const chat = JSON.stringify({model: "%s", messages: [{role: "user", content: "hi"}]});
  try {
    const r = await fetch(base + "/v1/chat/completions", {method: "POST", body: chat,
                                                          headers: {"content-type": "application/json"}});
    out.fetch = await r.text();
  } catch (e) { out.fetch = "blocked: " + e; }
  try {  // a CORS "simple request": no preflight, so the browser sends it whatever the answer
    const r = await fetch(base + "/v1/chat/completions", {method: "POST", body: chat});
    out.simple = await r.text();
  } catch (e) { out.simple = "blocked: " + e; }
  try {  // no-cors: the page can never read it, but the request goes out
    await fetch(base + "/v1/completions", {method: "POST", mode: "no-cors",
                                           body: JSON.stringify({model: "%s", prompt: "hi"})});
  } catch (e) {}
  out.socket = await new Promise((resolve) => {
    const ws = new WebSocket(base.replace("http", "ws") + "/v1/responses");
    const got = [];
    ws.onopen = () => ws.send(JSON.stringify({type: "response.create", model: "%s", store: false, input: "hi"}));
    ws.onmessage = (m) => { got.push(JSON.parse(m.data).type);
                            if (got[got.length - 1] === "response.completed") { ws.close(); resolve(got.join(" ")); } };
    ws.onerror = () => resolve("blocked: " + got.join(" "));
    setTimeout(() => resolve("timeout: " + got.join(" ")), 8000);
  });
  return out;
}""" % (MODEL, MODEL, MODEL)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"<!doctype html><title>some site</title><p>nothing to see"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@in_a_browser
async def test_a_page_from_another_site_cannot_use_the_server(serve):
    s = await serve([ANSWER])
    site = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    port = site.server_address[1]
    seen: dict[str, dict] = {}

    def session() -> None:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=FLAGS + ["--host-resolver-rules=MAP evil.example 127.0.0.1"])
            try:
                page = browser.new_page()
                page.goto(f"http://evil.example:{port}/")
                seen["evil"] = page.evaluate(PROBE, s.base)
                decoded_after_evil.append(s.engine.backend.tokens_decoded)
                # the same page from a loopback origin reads every answer: the probe itself works
                page.goto(f"http://localhost:{port}/")
                seen["local"] = page.evaluate(PROBE, s.base)
                # and the dashboard still works: it loads, connects to its feed and lists a request
                dash = browser.new_page()
                errors: list[str] = []
                dash.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                dash.goto(s.url("/dashboard"))
                dash.wait_for_selector("#conn.live", timeout=10_000)
                dash.locator("#requests tr.request").first.wait_for(timeout=10_000)
                seen["dashboard"] = {"errors": errors}
            finally:
                browser.close()

    decoded_after_evil: list[int] = []
    try:
        await trio.to_thread.run_sync(session)
    finally:
        site.shutdown()
        site.server_close()
    evil, local = seen["evil"], seen["local"]
    for way in ("fetch", "simple", "socket"):
        assert evil[way].startswith("blocked"), (way, evil[way])
        assert ANSWER not in evil[way]
    assert decoded_after_evil == [0]  # not even the simple or no-cors POSTs ran: the server refused them
    assert ANSWER in json.loads(local["fetch"])["choices"][0]["message"]["content"]
    assert ANSWER in json.loads(local["simple"])["choices"][0]["message"]["content"]
    assert local["socket"].endswith("response.completed"), local["socket"]
    assert seen["dashboard"]["errors"] == []

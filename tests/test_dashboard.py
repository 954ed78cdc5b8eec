"""The dashboard in a real headless browser (Debian's chromium driven by the playwright package; both
installed by .ci/run): the page loads with no console errors, requests sent through the API appear in its
table within 2 s without a reload, no prompt or answer text ever reaches it, the API key is asked for once
and kept in the tab, and the Host allow-list guards it like every route (the tests that need no browser run
without one)."""

from __future__ import annotations

import re
import time

import httpx
import pytest
import trio

from browser_harness import CHROMIUM, FLAGS, in_a_browser, sync_api

MODEL = "tinytitan-scripted"
SECRET_PROMPT = "my bank password is hunter2"
ANSWER = "The weather in Lisbon is mild."


class Browser:
    """One headless chromium page, on the worker thread that runs a test's browser session (the trio loop
    keeps serving meanwhile); console errors and page errors are collected."""

    def __init__(self, pw):
        self.browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 860})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def rows(self) -> int:
        return self.page.locator("#requests tr.request").count()

    def wait_rows(self, n: int, timeout_s: float = 2.0) -> float:
        """Seconds until the table shows ``n`` request rows (it must, within ``timeout_s``). Locators, not
        ``wait_for_function``: a JavaScript predicate is an eval, which the page's CSP forbids."""
        started = time.perf_counter()
        self.page.locator("#requests tr.request").nth(n - 1).wait_for(timeout=timeout_s * 1000)
        return time.perf_counter() - started


def browse(session) -> None:
    with sync_api.sync_playwright() as pw:
        b = Browser(pw)
        try:
            session(b)
        finally:
            b.browser.close()


@in_a_browser
async def test_the_dashboard_shows_requests_live(serve, tmp_path):
    s = await serve([ANSWER, "<think>\nHmm.\n</think>\n\nSunny.", "def f(): pass"])

    def session(b: Browser) -> None:
        b.page.goto(s.url("/"))  # a browser asks for text/html: the dashboard, not the JSON status
        b.page.wait_for_selector("#conn.live", timeout=10_000)
        assert b.page.title() == "tinytitan" and b.rows() == 0
        assert b.page.locator("#resident").inner_text() == MODEL
        import anthropic
        import openai

        oa = openai.OpenAI(base_url=s.url("/v1"), api_key="x", max_retries=0)
        oa.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": SECRET_PROMPT}])
        assert b.wait_rows(1) <= 2.0
        anthropic.Anthropic(base_url=s.base, api_key="x", max_retries=0).messages.create(
            model=MODEL, max_tokens=200, messages=[{"role": "user", "content": SECRET_PROMPT}])
        assert b.wait_rows(2) <= 2.0
        for _ in oa.completions.create(model=MODEL, prompt=SECRET_PROMPT, max_tokens=20, stream=True):
            pass
        assert b.wait_rows(3) <= 2.0
        newest = b.page.locator("#requests tr.request").first.inner_text()
        assert "openai_completions" in newest and "openai-python" in newest
        second = b.page.locator("#requests tr.request").nth(1).inner_text()
        assert "anthropic_messages" in second and "anthropic-python" in second and MODEL in second
        sync_api.expect(b.page.locator("#line-tps")).to_have_attribute("points", re.compile(r"\d+.*,.*\d"))
        html = b.page.content()
        assert SECRET_PROMPT not in html and "Lisbon" not in html and "Sunny" not in html
        b.page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        assert b.errors == [], b.errors

    await trio.to_thread.run_sync(browse, session)
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


@in_a_browser
async def test_the_dashboard_asks_for_the_api_key_once(serve, tmp_path):
    s = await serve(["ok"], api_key="sesame")

    def session(b: Browser) -> None:
        b.page.goto(s.url("/dashboard"))  # the page itself is open: it holds no data
        b.page.wait_for_selector("#keyform input", state="visible", timeout=10_000)
        b.page.fill("#keyform input", "sesame")
        b.page.click("#keyform button")
        b.page.wait_for_selector("#conn.live", timeout=10_000)
        assert b.page.evaluate("sessionStorage.getItem('tinytitan-api-key')") == "sesame"
        httpx.post(s.url("/v1/chat/completions"), headers={"authorization": "Bearer sesame"},
                   json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).raise_for_status()
        b.wait_rows(1)
        b.page.reload()  # the key is kept for the tab: no second prompt
        b.page.wait_for_selector("#conn.live", timeout=10_000)
        assert not b.page.locator("#keyform").is_visible() and b.rows() == 1
        assert b.errors == [], b.errors  # the key is asked for before any call: no 401 on the way

    await trio.to_thread.run_sync(browse, session)


@in_a_browser
async def test_the_model_buttons_unload_and_load(serve, demo_backend):
    s = await serve(backend=demo_backend, api_key="sesame")
    model = demo_backend.model_id

    def session(b: Browser) -> None:
        b.page.goto(s.url("/dashboard"))
        b.page.fill("#keyform input", "sesame")
        b.page.click("#keyform button")
        b.page.wait_for_selector("#conn.live", timeout=10_000)
        sync_api.expect(b.page.locator("#models button")).to_have_text("unload")
        b.page.click("#models button")  # POST /v1/models/unload, with the key; the page follows the new state
        sync_api.expect(b.page.locator("#resident")).to_have_text("none loaded", timeout=5000)
        assert s.engine.resident is None and not demo_backend.loaded
        b.page.click("#models button")
        sync_api.expect(b.page.locator("#resident")).to_have_text(model, timeout=5000)
        assert s.engine.resident == model and demo_backend.loaded
        assert b.errors == [], b.errors

    await trio.to_thread.run_sync(browse, session)


async def test_the_feed_needs_the_key_and_the_host_must_be_allowed(serve):
    s = await serve(["ok"], api_key="sesame")
    async with httpx.AsyncClient() as c:
        assert (await c.get(s.url("/dashboard/events"))).status_code == 401
        page = await c.get(s.url("/"), headers={"accept": "text/html"})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "connect-src 'self'" in page.headers["content-security-policy"]
        json = {"accept": "application/json"}  # the page's own probe: the JSON status, the model id with the key
        status = (await c.get(s.url("/"), headers=json)).json()
        assert status["status"] == "ok" and status["api_key_required"] is True and "model" not in status
        keyed = (await c.get(s.url("/"), headers={**json, "authorization": "Bearer sesame"})).json()
        assert keyed["model"] == "tinytitan-scripted"
        assert (await c.head(s.url("/"))).status_code == 200
        for path in ("/", "/dashboard", "/dashboard/events"):
            r = await c.get(s.url(path), headers={"host": "attacker.example", "accept": "text/html"})
            assert r.status_code == 403, path


async def test_the_page_loads_nothing_from_elsewhere():
    from tinytitan.observe.dashboard import page

    html = page().decode()
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    assert "<script src" not in html and "<link rel=\"stylesheet\"" not in html


async def test_head_of_the_live_feed_answers_its_headers_and_ends(serve):
    """werkzeug gives every GET route a HEAD, and the framework ran the feed's body for it: the endless feed held
    the connection, and the next request on it got no answer. A HEAD is its headers, then the end."""
    s = await serve(["ok"])
    async with httpx.AsyncClient(timeout=10) as c:
        head = await c.head(s.url("/dashboard/events"))
        assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
        assert (await c.get(s.url("/health"))).status_code == 200  # the same connection answers on


@in_a_browser
async def test_markup_in_a_user_agent_is_text_and_the_detail_row_spans_the_table(serve):
    """A client's User-Agent is shown as text, never markup; a row's detail (why the cache missed) spans every
    column of the table."""
    s = await serve(["ok", "ok"])

    def session(b: Browser) -> None:
        b.page.goto(s.url("/dashboard"))
        b.page.wait_for_selector("#conn.live", timeout=10_000)
        httpx.post(s.url("/v1/chat/completions"), headers={"user-agent": "<img\tsrc=x\tonerror=alert(1)>"},
                   json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).raise_for_status()
        b.wait_rows(1)
        row = b.page.locator("#requests tr.request").first
        assert row.locator("img").count() == 0
        cells = row.locator("td").count()
        row.click()
        detail = b.page.locator("#requests tr.detail").first.locator("td").first
        assert int(detail.get_attribute("colspan")) == cells
        assert detail.bounding_box()["width"] >= row.bounding_box()["width"] - 1
        assert b.errors == [], b.errors

    await trio.to_thread.run_sync(browse, session)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_a_method_the_root_does_not_serve_is_405_with_the_key_or_without(serve, method):
    s = await serve(["ok"], api_key="sesame")
    async with httpx.AsyncClient(timeout=30) as c:
        keyed = await c.request(method, s.url("/"), headers={"authorization": "Bearer sesame"})
        bare = await c.request(method, s.url("/"))
    assert (keyed.status_code, bare.status_code) == (405, 405), bare.text

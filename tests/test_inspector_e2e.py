"""The inspector page in headless Chromium (Debian's chromium, driven by Playwright):
list sessions, search, open one, and check what it shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from middleware import Config, SessionManager
from middleware.demo import SCRIPT
from middleware.demo.device import LAB
from tests.browser import CHROMIUM_FLAGS, serve
from tests.conftest import require_binary


@pytest.fixture
def populated(atlas: Config, real_redis_url: str, tmp_path: Path) -> Iterator[tuple[SessionManager, str]]:
    LAB.reset()
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "usage.jsonl")})
    with SessionManager(config, redis_url=real_redis_url) as mgr:
        sid = mgr.resolve_session("alice", "atlas")
        mgr.manage_notes(
            "alice", "atlas", "overwrite", content="## Devices\n- device1 on sunri-pi1\n\n## Preferences\n- starts on google_tv"
        )
        for request in SCRIPT[:6]:
            mgr.chat(sid, request, model="scripted/atlas")
        for name in ["bob/atlas/one", "carol/scout/two", "demo"]:
            mgr.record_turn(name, user=f"hello from {name}", assistant="hi")
        yield mgr, sid


def test_browse_search_and_open_a_session(populated: tuple[SessionManager, str], tmp_path: Path) -> None:
    """The page lists sessions, narrows them by search, and opens one with its memory,
    its conversation and the last prompt's token breakdown."""
    from playwright.sync_api import expect, sync_playwright

    from middleware.inspector.app import create_app

    mgr, sid = populated
    chromium = require_binary("chromium")
    with serve(create_app(mgr)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=list(CHROMIUM_FLAGS))
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        problems: list[str] = []  # console errors: a Content-Security-Policy violation among them
        page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        page.goto(url + "/")
        page.wait_for_selector("#session-list li[data-session]")
        listed = page.locator("#session-list li[data-session]").evaluate_all("items => items.map(i => i.dataset.session)")
        assert set(listed) == {sid, "bob/atlas/one", "carol/scout/two", "demo"}
        assert listed[0] == "demo"  # newest first
        assert "4 session(s)" in page.inner_text("#page-info")

        page.fill("#search", "alice")
        # A locator, not wait_for_function: that evaluates a string, which the page's policy forbids.
        expect(page.locator("#session-list li[data-session]")).to_have_count(1)
        page.click(f"#session-list li[data-session='{sid}']")
        page.wait_for_selector("#session-title")
        assert page.inner_text("#session-title") == sid
        assert "6 turn(s)" in page.inner_text("#detail .sub") and "user alice" in page.inner_text("#detail .sub")

        tokens = page.inner_text("#prompt-tokens")
        assert "tokens sent" in tokens and "with the full history" in tokens and "% saved" in tokens
        cache = page.inner_text("#prompt-cache")  # the first call as billed: schemas and the provider's cache
        assert "openai caching rules" in cache and "tool schemas: 5 of 5 sent" in cache and "read from cache" in cache
        layers = page.locator(".legend span").evaluate_all("spans => spans.map(s => s.dataset.layer)")
        assert {"system", "context", "summary", "recent", "current", "notes"} <= set(layers)
        assert page.locator("#last-prompt .msg.user").last.inner_text().endswith("go to network")

        context = page.inner_text("#context-table")
        assert "userinterface_name" in context and "google_tv" in context and "sunri-pi1" in context
        assert page.locator("#summary .entry").count() == 3
        assert "device1 on sunri-pi1" in page.inner_text("#notes")
        tools = page.locator("#conversation [data-kind=tool]")
        assert tools.count() == 6 and "take_control" in tools.first.inner_text()
        tools.first.locator("summary").click()
        assert "control_session" in tools.first.inner_text()

        # Found: the URL did not change per session (nothing to share or bookmark). It does, and opens it.
        assert page.evaluate("location.hash") == "#" + urlencode({"session": sid})
        other = browser.new_page(viewport={"width": 1280, "height": 1000})
        other.goto(url + "/#" + urlencode({"session": "carol/scout/two"}))
        other.wait_for_selector("#session-title")
        assert other.inner_text("#session-title") == "carol/scout/two" and "1 turn(s)" in other.inner_text("#detail .sub")
        other.close()

        shot = tmp_path / "inspector.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 50_000
    assert problems == []


def test_the_page_works_with_a_non_ascii_token_under_its_policy(populated: tuple[SessionManager, str]) -> None:
    """Found: a token such as 'pässwörd' failed in the header. Opened as /?token=<token>, the
    page sends it in its Authorization header as UTF-8 bytes (fetch refuses characters past
    latin-1, and sent 'ä' as one latin-1 byte), lists and opens sessions, and draws the token
    bar (styles set through CSSOM) with no Content-Security-Policy violation."""
    from playwright.sync_api import sync_playwright

    from middleware.inspector.app import create_app

    mgr, sid = populated
    token = "pässwörd 密码"
    chromium = require_binary("chromium")
    with serve(create_app(mgr, token=token)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=list(CHROMIUM_FLAGS))
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        problems: list[str] = []
        page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
        sent: list[str | None] = []
        page.on("request", lambda request: sent.append(request.headers.get("authorization")) if "/api/" in request.url else None)
        page.goto(url + "/?" + urlencode({"token": token}) + "#" + urlencode({"session": sid}))
        page.wait_for_selector("#session-list li[data-session]")
        page.wait_for_selector("#session-title")
        assert page.inner_text("#session-title") == sid
        widths = page.locator(".bar div").evaluate_all("bars => bars.map(b => b.getBoundingClientRect().width)")
        assert widths and all(width > 0 for width in widths)  # the inline widths applied
        assert page.locator(".legend i").first.evaluate("i => getComputedStyle(i).backgroundColor") != "rgba(0, 0, 0, 0)"
        assert page.evaluate("document.styleSheets.length") == 1  # the inline <style> applied
        browser.close()
    assert problems == [] and sent and all(header is not None for header in sent)

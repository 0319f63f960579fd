"""Regenerate the pictures in docs/ from a fresh demo run.

    python docs/screenshots.py

Runs `middleware demo` in a temporary folder (offline, embedded store), renders
`middleware report --html` of its usage log and photographs it with headless
Chromium (Debian's `chromium` package) into docs/report.png; then plays part of
the demo for a user's session, serves `middleware inspect` on it and photographs
the inspector with that session open into docs/inspector.png (Playwright).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # tests.browser, when run as `python docs/screenshots.py`


def chromium_path() -> str:
    return shutil.which("chromium") or sys.exit("chromium not found: apt install chromium")


def inspector_screenshot(out: Path) -> None:
    from playwright.sync_api import sync_playwright

    from middleware import SessionManager, load_config
    from middleware.demo import CONFIG_PATH as ATLAS_PATH
    from middleware.demo import SCRIPT
    from middleware.inspector.app import create_app
    from tests.browser import CHROMIUM_FLAGS, serve

    config = load_config(ATLAS_PATH, env={}).with_overrides(usage_log={"path": None}, store={"url": "memory://docs"})
    mgr = SessionManager(config)
    sid = mgr.resolve_session("alice", "atlas")
    mgr.manage_notes(
        "alice", "atlas", "overwrite", content="## Devices\n- device1 on sunri-pi1\n\n## Preferences\n- starts on google_tv"
    )
    for request in SCRIPT[:8]:
        mgr.chat(sid, request, model="scripted/atlas")
    for name in ["bob/atlas/4f1c2a9e7b3d", "carol/scout/9a8b7c6d5e4f"]:
        mgr.record_turn(name, user="hello", assistant="hi")
    with serve(create_app(mgr)) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        page = browser.new_page(viewport={"width": 1280, "height": 1500})
        page.goto(url + "/")
        page.click(f"#session-list li[data-session='{sid}']")
        page.wait_for_selector("#session-title")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out), full_page=False)
        browser.close()


def main() -> None:
    from tests.browser import screenshot

    inspector_screenshot(DOCS / "inspector.png")
    print(f"wrote {DOCS / 'inspector.png'}")
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        subprocess.run([sys.executable, "-m", "middleware", "demo"], cwd=folder, check=True, capture_output=True)
        page = folder / "report.html"
        subprocess.run(
            [sys.executable, "-m", "middleware", "report", "middleware-usage.jsonl", "--html", str(page)],
            cwd=folder,
            check=True,
            capture_output=True,
        )
        screenshot(chromium_path(), page.as_uri(), DOCS / "report.png")
    print(f"wrote {DOCS / 'report.png'}")


if __name__ == "__main__":
    main()

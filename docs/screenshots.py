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
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
]  # fmt: skip


def screenshot(page: Path, out: Path, size: str = "900,1080") -> None:
    chromium = shutil.which("chromium") or sys.exit("chromium not found: apt install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                        f"--screenshot={out}", page.as_uri()], check=True, capture_output=True, timeout=120)


def inspector_screenshot(out: Path) -> None:
    import threading
    import time

    import uvicorn
    from playwright.sync_api import sync_playwright

    from middleware import SessionManager, load_config
    from middleware.demo import SCRIPT
    from middleware.inspector_app import create_app

    config = load_config(env={}).with_overrides(usage_log={"path": None}, store={"url": "memory://docs"})
    mgr = SessionManager(config)
    sid = mgr.resolve_session("alice", "atlas")
    mgr.manage_notes("alice", "atlas", "overwrite", content="## Devices\n- device1 on sunri-pi1\n\n## Preferences\n- starts on google_tv")
    for request in SCRIPT[:8]:
        mgr.chat(sid, request, model="scripted/atlas")
    for name in ["bob/atlas/4f1c2a9e7b3d", "carol/scout/9a8b7c6d5e4f"]:
        mgr.record_turn(name, user="hello", assistant="hi")
    server = uvicorn.Server(uvicorn.Config(create_app(mgr), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    chromium = shutil.which("chromium") or sys.exit("chromium not found: apt install chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=[f for f in CHROMIUM_FLAGS if f != "--headless"])
        page = browser.new_page(viewport={"width": 1280, "height": 1500})
        page.goto(f"http://127.0.0.1:{port}/")
        page.click(f"#session-list li[data-session='{sid}']")
        page.wait_for_selector("#session-title")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out), full_page=False)
        browser.close()
    server.should_exit = True
    thread.join(10)


def main() -> None:
    inspector_screenshot(DOCS / "inspector.png")
    print(f"wrote {DOCS / 'inspector.png'}")
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        subprocess.run([sys.executable, "-m", "middleware", "demo"], cwd=folder, check=True, capture_output=True)
        page = folder / "report.html"
        subprocess.run([sys.executable, "-m", "middleware", "report", "middleware-usage.jsonl", "--html", str(page)],
                       cwd=folder, check=True, capture_output=True)
        screenshot(page, DOCS / "report.png")
    print(f"wrote {DOCS / 'report.png'}")


if __name__ == "__main__":
    main()

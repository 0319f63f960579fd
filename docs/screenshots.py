"""Regenerate the pictures in docs/ from a fresh demo run.

    python docs/screenshots.py

Runs `middleware demo` in a temporary folder (offline, embedded store), renders
`middleware report --html` of its usage log and photographs it with headless
Chromium (Debian's `chromium` package) into docs/report.png.
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


def main() -> None:
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

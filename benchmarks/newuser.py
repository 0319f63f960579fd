"""A new user's first minutes, from a fresh clone: the installs, the demo, the tests.

    python -m benchmarks.newuser             # about 15 minutes; rewrites its section of BENCHMARKS.md
    python -m benchmarks.newuser --no-tests  # the installs and the demo only (the tests: "not run")

The checkout is cloned (what is committed, nothing else) into a temporary folder; there, as
the README says, one virtualenv gets the library alone (``pip install .``) and another the
development install (``pip install ".[dev]"``), each with pip's cache off, from this
machine's package registry. Measured: each install's wall time, its size on disk (the
virtualenv's site-packages) and package count, the litellm each resolved, ``import
middleware`` beyond a bare interpreter (median of 7), ``middleware demo`` from an empty
folder, and the README's test command in the clone.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import write_section
from benchmarks.overhead import import_time

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "BENCHMARKS.md"
START, END = "<!-- newuser:start -->", "<!-- newuser:end -->"
TITLE = "## A new user's first minutes"
COMMAND = "python -m benchmarks.newuser"


def _env() -> dict[str, str]:
    """A new user's environment: nothing of ours set, pip's cache off."""
    unset = {"REDIS_URL", "MIDDLEWARE_CONFIG", "LITELLM_LOCAL_MODEL_COST_MAP", "VIRTUAL_ENV", "PYTHONPATH"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def _timed(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float = 3600
) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - started, done


def _checked(done: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if done.returncode != 0:
        sys.exit(f"{what} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


def _size(venv: Path) -> int:
    return sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())


def _venv(folder: Path, name: str, target: str, clone: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """A virtualenv with ``pip install <target>`` run in the clone: its figures."""
    venv = folder / name
    _checked(subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True), f"venv {name}")
    python = venv / "bin" / "python"
    seconds, done = _timed([str(python), "-m", "pip", "install", "--quiet", target], clone, env)
    _checked(done, f"pip install {target}")
    listed = _checked(
        subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, env=dict(env)),
        "pip list",
    )
    packages = dict(line.split("==", 1) for line in listed.stdout.splitlines() if "==" in line)
    return {
        "python": python,
        "seconds": seconds,
        "bytes": _size(venv),
        "packages": len(packages),
        "litellm": packages.get("litellm", "?"),
    }


def _test_command(readme: str) -> str:
    found = re.search(r"## Run the tests\n(?:.*\n)*?```bash\n(.+?)\n```", readme)
    return found.group(1) if found else "python -m pytest"


def measure(tests: bool = True) -> dict[str, Any]:
    env = _env()
    with tempfile.TemporaryDirectory(prefix="newuser-") as tmp:
        folder = Path(tmp)
        clone = folder / "clone"
        _checked(subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], capture_output=True, text=True), "git clone")
        core = _venv(folder, "core", ".", clone, env)
        dev = _venv(folder, "dev", ".[dev]", clone, env)
        empty = folder / "empty"
        empty.mkdir()
        bin_dir = str(dev["python"].parent)
        dev_env = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", ""), "VIRTUAL_ENV": str(dev["python"].parent.parent)}
        demo_seconds, demo = _timed(["middleware", "demo"], empty, {**dev_env, "COLUMNS": "80"}, timeout=600)
        _checked(demo, "middleware demo")
        figures: dict[str, Any] = {
            "core": {k: v for k, v in core.items() if k != "python"},
            "dev": {k: v for k, v in dev.items() if k != "python"},
            "import_ms": import_time(runs=7, python=str(core["python"]))[0],
            "demo_seconds": demo_seconds,
            "demo_lines": len(demo.stdout.splitlines()),
            "demo_widest": max((len(line) for line in demo.stdout.splitlines()), default=0),
            "test_command": _test_command((clone / "README.md").read_text(encoding="utf-8")),
            "tests": None,
        }
        if tests:
            command = figures["test_command"]
            seconds, done = _timed(["bash", "-c", command], clone, {**dev_env, "CI": "true"}, timeout=5400)
            summary = next(
                (
                    line
                    for line in reversed(done.stdout.splitlines())
                    if " in " in line and ("passed" in line or "failed" in line)
                ),
                "",
            )
            figures["tests"] = {"seconds": seconds, "status": done.returncode, "summary": summary.strip("= ")}
        shutil.rmtree(clone, ignore_errors=True)
    return figures


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def section(figures: Mapping[str, Any], commit: str, machine: str) -> str:
    core, dev, tests = figures["core"], figures["dev"], figures["tests"]
    same = core["litellm"] == dev["litellm"]
    rows = [
        f"| `pip install .` (the library alone) | {_minutes(core['seconds'])} | {_mb(core['bytes'])} | {core['packages']} | {core['litellm']} |",
        f'| `pip install ".[dev]"` (the README\'s set-up) | {_minutes(dev["seconds"])} | {_mb(dev["bytes"])} | {dev["packages"]} | {dev["litellm"]} |',
    ]
    if tests is None:
        test_line = f"The tests (`{figures['test_command']}`): not run in this measurement (`--no-tests`)."
    else:
        verdict = "passed" if tests["status"] == 0 else f"FAILED (exit status {tests['status']})"
        test_line = (f"The tests (`{figures['test_command']}`, in the clone, with CI=true): {_minutes(tests['seconds'])}, "
                     f"{verdict}: {tests['summary'] or 'no summary line'}.")  # fmt: skip
    lines = [
        START,
        TITLE,
        "",
        f"`{COMMAND}` at commit {commit}, on {machine}: a fresh clone, each install into a new virtualenv with pip's cache off "
        "(packages from this machine's registry mirror).",
        "",
        "| step | time | size on disk | packages | litellm |",
        "|---|---:|---:|---:|---|",
        *rows,
        "",
        f"`import middleware` (the library alone, beyond a bare interpreter): {figures['import_ms']:.0f} ms. "
        f"`middleware demo` from an empty folder at 80 columns: {_minutes(figures['demo_seconds'])}, "
        f"{figures['demo_lines']} lines, the widest {figures['demo_widest']} characters. {test_line}",
        "",
        "The two installs resolve the same litellm."
        if same
        else f"The two installs resolve different litellm releases ({core['litellm']} alone, {dev['litellm']} with the development "
        "extras, which LiteLLM's proxy holds back): the suite runs on the second.",
        END,
    ]
    return "\n".join(lines)


def kept(report: str) -> str:
    """This section of ``report`` as it is, or "" (the full run keeps it; this command remakes it)."""
    if START not in report or END not in report:
        return ""
    return report[report.index(START) : report.index(END) + len(END)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-tests", action="store_true", help="measure the installs and the demo only")
    args = parser.parse_args(argv)
    from benchmarks.__main__ import machine
    from benchmarks.stamps import commit

    facts = machine()
    text = section(measure(tests=not args.no_tests), commit(), f"{facts['cpu']}, {facts['memory']}, Python {facts['python']}")
    from benchmarks.load import SECTION

    write_section(REPORT, text, START, END, before=SECTION)  # ahead of section 8, which is remade on its own
    print(text)


if __name__ == "__main__":
    main()

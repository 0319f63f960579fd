"""The endpoint under load, side by side with LiteLLM's own proxy, in one run.

    pip install -e ".[bench]"
    python -m benchmarks load                    # about 15 minutes; updates section 8 of BENCHMARKS.md
    python -m benchmarks load --soak-seconds 60  # a shorter soak

Everything runs on this machine, on loopback: a mock OpenAI-compatible upstream that
answers at once (so only what sits in front of it is measured), a redis-server,
``middleware serve`` and ``litellm`` (the proxy), each a single process forwarding to the
same mock; at each level the mock called directly, the endpoint and the proxy are
measured back to back. Clients each hold a connection and send one
request after another (a new user message each, their own session each); added latency is
a system's percentile minus the direct call's at the same concurrency. Afterwards every
turn the endpoint answered is looked for in Redis: lost and duplicated turns are counted.
The soak then runs the endpoint at a bounded request rate and samples its RSS.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 16, 128)
REQUESTS = {1: 500, 16: 3000, 128: 6000}  # per system and level, after a warm-up
MASTER_KEY = "sk-bench-master-key-0000"
SECTION = "## 8. The endpoint under load"


@dataclass
class Run:
    system: str
    concurrency: int
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests
    errors: int = 0
    seconds: float = 0.0
    sent: list[str] = field(default_factory=list)  # the user messages answered (for the endpoint's count)

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000 if ordered else float("nan")


# --- processes ----------------------------------------------------------------------------------


def _python(*args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = log.open("wb") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, *args], env={**os.environ, **(env or {})}, stdout=out, stderr=out)


def _wait_http(url: str, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


@contextmanager
def _running(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _mock(port: int) -> subprocess.Popen[bytes]:
    code = ("import uvicorn; from middleware.testing import mock_openai_app; "
            f"uvicorn.run(mock_openai_app('The mock answers at once.'), host='127.0.0.1', port={port}, log_level='warning')")  # fmt: skip
    return _python("-c", code)


def _serve(folder: Path, port: int, redis_url: str, mock: str) -> subprocess.Popen[bytes]:
    config = {"store": {"url": redis_url}, "usage_log": {"path": str(folder / "usage.jsonl")}, "traces": {"max_entries": 100_000},
              "serve": {"models": {"mock": {"model": "openai/mock", "api_base": mock}}}}  # fmt: skip
    (folder / "middleware.yaml").write_text(json.dumps(config))  # JSON is YAML
    env = {"OPENAI_API_KEY": "sk-bench-upstream", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return _python("-m", "middleware", "--config", str(folder / "middleware.yaml"), "serve", "--port", str(port), env=env,
                   log=folder / "serve.log")  # fmt: skip


def _litellm_proxy(folder: Path, port: int, mock: str) -> subprocess.Popen[bytes]:
    config = {"model_list": [{"model_name": "mock", "litellm_params": {"model": "openai/mock", "api_base": mock, "api_key": "sk-bench-upstream"}}],
              "litellm_settings": {"set_verbose": False}}  # fmt: skip
    (folder / "litellm.yaml").write_text(json.dumps(config))
    env = {"LITELLM_MASTER_KEY": MASTER_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    return _python("-m", "litellm.proxy.proxy_cli", "--config", str(folder / "litellm.yaml"), "--host", "127.0.0.1", "--port", str(port),
                   env=env, log=folder / "litellm.log")  # fmt: skip


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- clients -----------------------------------------------------------------------------------


async def _load(url: str, system: str, concurrency: int, total: int, *, headers: dict[str, str], tag: str,
                rate: float | None = None) -> Run:  # fmt: skip
    """``concurrency`` clients sending ``total`` requests in all, one after another each; with
    ``rate``, no more than that many requests a second in all."""
    import aiohttp

    run, issued = Run(system, concurrency), 0
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def client(number: int) -> None:
            nonlocal issued
            turn = 0
            while issued < total:
                issued += 1
                if rate is not None:
                    await asyncio.sleep(max(0.0, started + issued / rate - time.perf_counter()))
                text = f"{tag} c{number} t{turn} hello there"
                body = {"model": "mock", "messages": [{"role": "user", "content": text}]}
                sent = time.perf_counter()
                try:
                    async with session.post(url, json=body, headers={**headers, "X-Session-Id": f"{tag}-c{number}"}) as response:
                        await response.read()
                        ok = response.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    run.latencies.append(time.perf_counter() - sent)
                    run.sent.append(text)
                else:
                    run.errors += 1
                turn += 1

        await asyncio.gather(*(client(n) for n in range(concurrency)))
    run.seconds = time.perf_counter() - started
    return run


def measure(url: str, system: str, concurrency: int, total: int, headers: dict[str, str], tag: str) -> Run:
    asyncio.run(_load(url, system, concurrency, min(total // 10, 200) + concurrency, headers=headers, tag=f"warm-{tag}"))
    return asyncio.run(_load(url, system, concurrency, total, headers=headers, tag=tag))


def count_turns(redis_url: str, runs: list[Run]) -> dict[str, int]:
    """Every answered turn of the endpoint's runs looked for in Redis, by its user message."""
    from middleware import Config, SessionManager

    expected = [text for run in runs for text in run.sent]
    sessions = {text.split(" t", 1)[0].replace(" ", "-") for text in expected}
    found: list[str] = []
    counted = 0
    with SessionManager(Config().with_overrides(store={"url": redis_url}, usage_log={"path": None})) as mgr:
        for session in sessions:
            inspection = mgr.inspect(session, traces=100_000)
            found += [json.loads(raw)["events"][0]["content"] for raw in inspection.traces or ()]
            counted += inspection.state.turns
    found_set = set(found)
    return {"answered": len(expected), "recorded": len(found), "turn_counters": counted,
            "lost": sum(1 for text in expected if text not in found_set), "duplicated": len(found) - len(found_set)}  # fmt: skip


def soak(url: str, pid: int, seconds: float, rate: float, concurrency: int) -> list[tuple[float, int, float]]:
    """(elapsed s, requests done, RSS MiB) every tenth of the soak, at ``rate`` requests a second."""
    samples: list[tuple[float, int, float]] = [(0.0, 0, rss_mib(pid))]
    total = int(seconds * rate)
    step = max(total // 10, 1)
    done = 0
    started = time.perf_counter()
    while done < total:
        batch = min(step, total - done)
        asyncio.run(_load(url, "soak", concurrency, batch, headers={}, tag=f"soak{done}", rate=rate))
        done += batch
        samples.append((time.perf_counter() - started, done, rss_mib(pid)))
    return samples


# --- the run -----------------------------------------------------------------------------------


def run(
    *, soak_seconds: float = 600, soak_rate: float = 50, levels: tuple[int, ...] = LEVELS, scale: float = 1.0
) -> dict[str, Any]:
    """Every system at every level, the three measured back to back at each level (so a load
    that comes and goes on a shared machine weighs on them alike), then the soak."""
    from middleware.testing import RedisServer, free_port

    results: dict[str, Any] = {"runs": [], "levels": levels}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        mock_port, serve_port, proxy_port = free_port(), free_port(), free_port()
        mock = f"http://127.0.0.1:{mock_port}/v1"
        with RedisServer(folder / "redis") as redis, _running(_mock(mock_port)) as mock_process:
            _wait_http(f"{mock}/models", mock_process)
            with (
                _running(_serve(folder, serve_port, redis.url, mock)) as serve,
                _running(_litellm_proxy(folder, proxy_port, mock)) as proxy,
            ):
                _wait_http(f"http://127.0.0.1:{serve_port}/health", serve)
                _wait_http(f"http://127.0.0.1:{proxy_port}/health/liveliness", proxy)  # its /v1/models needs its key
                systems = [("direct", f"{mock}/chat/completions", {}),
                           ("middleware serve", f"http://127.0.0.1:{serve_port}/v1/chat/completions", {}),
                           ("LiteLLM proxy", f"http://127.0.0.1:{proxy_port}/v1/chat/completions", {"Authorization": f"Bearer {MASTER_KEY}"})]  # fmt: skip
                for level in levels:
                    total = max(int(REQUESTS.get(level, 2000) * scale), level * 4)
                    for name, url, headers in systems:
                        print(f"  {name} at {level} clients: {total} requests", flush=True)
                        results["runs"].append(measure(url, name, level, total, headers, f"L{level}"))
                results["turns"] = count_turns(redis.url, [r for r in results["runs"] if r.system == "middleware serve"])
                if soak_seconds > 0:
                    print(f"  soak: {soak_seconds:g} s at {soak_rate:g} requests/s", flush=True)
                    results["soak"] = soak(systems[1][1], serve.pid, soak_seconds, soak_rate, 16)
                    results["soak_settings"] = (soak_seconds, soak_rate)
    return results


def _commit() -> str:
    from benchmarks.__main__ import commit

    return commit()


def render(results: dict[str, Any], command: str) -> str:
    runs: list[Run] = results["runs"]
    direct = {r.concurrency: r for r in runs if r.system == "direct"}
    lines = [
        SECTION,
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {_commit()} with `{command}` (see `benchmarks/load.py`). A mock "
        "OpenAI-compatible upstream on loopback answers at once; each system is one process forwarding to it (the endpoint "
        "with a real redis-server), and N clients each send one request after another, a new message in a session of their "
        "own. Added latency is the system's percentile minus the mock's own at the same concurrency. All processes share "
        "this machine's 2 cores, the load generator included, so the figures compare the systems rather than bound them.",
        "",
        "| clients | system | requests/s | p50 ms | p99 ms | added p50 ms | added p99 ms | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for level in results["levels"]:
        base = direct.get(level)
        for run in (r for r in runs if r.concurrency == level):
            added = "" if run.system == "direct" or base is None else f"{run.percentile(0.5) - base.percentile(0.5):.2f}"
            added99 = "" if run.system == "direct" or base is None else f"{run.percentile(0.99) - base.percentile(0.99):.2f}"
            lines.append(f"| {level} | {run.system} | {run.throughput:,.0f} | {run.percentile(0.5):.2f} | {run.percentile(0.99):.2f} "
                         f"| {added} | {added99} | {run.errors} |")  # fmt: skip
    lines += ["", _verdict(runs, results["levels"])]
    turns = results.get("turns")
    if turns:
        lines += ["", f"**Turns.** The endpoint answered {turns['answered']:,} turns; Redis holds {turns['recorded']:,} turn records "
                      f"(turn counters: {turns['turn_counters']:,}): **{turns['lost']} lost, {turns['duplicated']} duplicated**."]  # fmt: skip
    samples = results.get("soak")
    if samples:
        seconds, rate = results["soak_settings"]
        first = samples[1][2] if len(samples) > 1 else samples[0][2]
        lines += ["", f"**Soak.** {seconds / 60:g} minutes at {rate:g} requests/s from 16 clients ({samples[-1][1]:,} requests, "
                      f"sessions of their own each round), the endpoint's RSS sampled every tenth of the way: from "
                      f"{first:.1f} MiB after the first tenth to {samples[-1][2]:.1f} MiB at the end "
                      f"({samples[-1][2] - first:+.1f} MiB).", "",
                  "| elapsed | requests | RSS MiB |", "|---:|---:|---:|",
                  *[f"| {elapsed:.0f} s | {done:,} | {rss:.1f} |" for elapsed, done, rss in samples]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _verdict(runs: list[Run], levels: tuple[int, ...]) -> str:
    """The issue's target, checked: more requests/s and less added latency than LiteLLM's proxy at every level."""
    by = {(r.system, r.concurrency): r for r in runs}

    def better(level: int, measure: Any, higher: bool) -> str:
        ours, theirs = by.get(("middleware serve", level)), by.get(("LiteLLM proxy", level))
        if ours is None or theirs is None:
            return "n/a"
        return "yes" if (measure(ours) > measure(theirs)) == higher else "no"

    at = ", ".join(map(str, levels))
    throughput = ", ".join(better(level, lambda r: r.throughput, True) for level in levels)
    p50 = ", ".join(better(level, lambda r: r.percentile(0.5), False) for level in levels)
    p99 = ", ".join(better(level, lambda r: r.percentile(0.99), False) for level in levels)
    return (f"**Against LiteLLM's proxy** at {at} clients: higher throughput: {throughput}; lower added p50: {p50}; "
            f"lower added p99: {p99}. Both forward through litellm, whose own per-call cost is most of the endpoint's.")  # fmt: skip


def write_section(report: Path, section: str) -> None:
    """Put ``section`` into ``report`` in place of its old version (or at the end), leaving the rest as it is."""
    text = report.read_text(encoding="utf-8") if report.exists() else "# Benchmarks\n"
    if SECTION in text:
        head, rest = text.split(SECTION, 1)
        tail = rest.split("\n## ", 1)
        text = head + section + ("\n## " + tail[1] if len(tail) > 1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    report.write_text(text, encoding="utf-8")


def kept_section(report: Path) -> str:
    """The load section of ``report`` as it is (the full run keeps it; ``python -m benchmarks load`` remakes it)."""
    text = report.read_text(encoding="utf-8") if report.exists() else ""
    if SECTION not in text:
        return ""
    return SECTION + text.split(SECTION, 1)[1].split("\n## ", 1)[0].rstrip("\n") + "\n"


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks load", description="The endpoint under load, beside LiteLLM's proxy."
    )
    parser.add_argument("--soak-seconds", type=float, default=600, help="soak length (default 600; 0 skips the soak)")
    parser.add_argument("--soak-rate", type=float, default=50, help="requests a second during the soak (default 50)")
    parser.add_argument("--scale", type=float, default=1.0, help="requests per level, as a fraction of the default counts")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    command = "python -m benchmarks load" + "".join(f" {a}" for a in argv if a != "--no-write")
    section = render(run(soak_seconds=args.soak_seconds, soak_rate=args.soak_rate, scale=args.scale), command)
    if args.no_write:
        print(section)
    else:
        write_section(ROOT / "BENCHMARKS.md", section)
        print(section)

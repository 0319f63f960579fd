"""The endpoint under load, side by side with LiteLLM's own proxy, three runs of each level.

    pip install -e ".[bench]"
    python -m benchmarks load                    # about 25 minutes on 2 cores; updates section 8 of BENCHMARKS.md
    python -m benchmarks load --soak-seconds 60  # a shorter soak

Everything runs on this machine, on loopback: a mock OpenAI-compatible upstream that
answers at once (so only what sits in front of it is measured), a redis-server,
``middleware serve`` and ``litellm`` (the proxy), each a single process forwarding to the
same mock. Clients each hold a connection and send one request after another (a new user
message each, their own session each). Every request is paired with a direct call to the
mock by the same client, just before or just after it (alternately); its added latency is
its time minus its direct call's. Each level is run three times, interleaved (run 1 of
every system, then run 2, ...), so that drift on a shared machine weighs on every system
alike; the report gives the median and the spread, and a verdict against the proxy only
where all runs agree. Afterwards every turn the endpoint answered is looked for in Redis:
lost and duplicated turns are counted. The soak then runs the endpoint at a bounded
request rate and samples its RSS.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 16, 128)
RUNS = 3
REQUESTS = {1: 500, 16: 2000, 128: 4000}  # per system, level and run, each paired with a direct call, after a warm-up
# Seconds a paired request takes on a 2-core AMD EPYC, by system and level: only for the
# time printed before the run starts.
SECONDS_PER_REQUEST = {
    "direct": {1: 0.0009, 16: 0.0003, 128: 0.0006},
    "middleware serve": {1: 0.0065, 16: 0.005, 128: 0.006},
    "LiteLLM proxy": {1: 0.0095, 16: 0.0105, 128: 0.011},
}
STARTUP_SECONDS = 30  # the processes' start and the turn count
MASTER_KEY = "sk-bench-master-key-0000"
SECTION = "## 8. The endpoint under load"
ENDPOINT, PROXY = "middleware serve", "LiteLLM proxy"


@dataclass
class Run:
    system: str
    concurrency: int
    number: int = 1  # which of the repeated runs
    latencies: list[float] = field(default_factory=list)  # seconds, the system's successful calls
    added: list[float] = field(default_factory=list)  # seconds, each successful call minus its paired direct call
    direct_seconds: float = 0.0  # the clients' time in the paired direct calls
    errors: int = 0  # failed calls to the system
    direct_errors: int = 0  # failed paired direct calls (their requests have no added latency)
    seconds: float = 0.0
    sent: list[str] = field(default_factory=list)  # the user messages answered (for the endpoint's count)

    @property
    def throughput(self) -> float:
        """The system's answered calls a second of the run's wall time (the paired direct calls' time included)."""
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    @property
    def direct_share(self) -> float:
        """The part of the clients' time spent in the paired direct calls."""
        busy = self.direct_seconds + sum(self.latencies)
        return self.direct_seconds / busy if busy else 0.0

    def added_ms(self, q: float) -> float:
        return percentile(self.added, q)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (seconds), nearest rank, in milliseconds."""
    ordered = sorted(values)
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
                direct: str | None = None, rate: float | None = None) -> Run:  # fmt: skip
    """``concurrency`` clients sending ``total`` requests in all, one after another each; with
    ``direct`` (the mock's URL), each request paired with the same request sent there by the
    same client, before it for every other request and after it otherwise; with ``rate``, no
    more than that many requests a second in all."""
    import aiohttp

    result, issued = Run(system, concurrency), 0
    timeout = aiohttp.ClientTimeout(total=120)

    async def call(session: aiohttp.ClientSession, target: str, body: dict[str, Any], extra: dict[str, str]) -> float | None:
        """The call's time in seconds, or None when it failed."""
        sent = time.perf_counter()
        try:
            async with session.post(target, json=body, headers=extra) as response:
                await response.read()
                ok = response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            ok = False
        return time.perf_counter() - sent if ok else None

    started = time.perf_counter()
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as to_mock,
    ):

        async def client(number: int) -> None:
            nonlocal issued
            turn = 0
            while issued < total:
                issued += 1
                if rate is not None:
                    await asyncio.sleep(max(0.0, started + issued / rate - time.perf_counter()))
                text = f"{tag} c{number} t{turn} hello there"
                body = {"model": "mock", "messages": [{"role": "user", "content": text}]}
                own = {**headers, "X-Session-Id": f"{tag}-c{number}"}
                base: float | None = None
                if direct is None:
                    took = await call(session, url, body, own)
                elif (number + turn) % 2:
                    base = await call(to_mock, direct, body, {})
                    took = await call(session, url, body, own)
                else:
                    took = await call(session, url, body, own)
                    base = await call(to_mock, direct, body, {})
                if took is None:
                    result.errors += 1
                else:
                    result.latencies.append(took)
                    result.sent.append(text)
                if direct is not None:
                    if base is None:
                        result.direct_errors += 1
                    else:
                        result.direct_seconds += base
                        if took is not None:
                            result.added.append(took - base)
                turn += 1

        await asyncio.gather(*(client(n) for n in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result


def warm_up(total: int, concurrency: int) -> int:
    return min(total // 20, 100) + concurrency


def measure(url: str, system: str, concurrency: int, total: int, headers: dict[str, str], tag: str, direct: str) -> Run:
    """A short warm-up (unpaired), then ``total`` paired requests."""
    asyncio.run(_load(url, system, concurrency, warm_up(total, concurrency), headers=headers, tag=f"warm-{tag}"))
    return asyncio.run(_load(url, system, concurrency, total, headers=headers, tag=tag, direct=direct))


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


def requests_per_run(levels: tuple[int, ...], scale: float) -> dict[int, int]:
    return {level: max(int(REQUESTS.get(level, 2000) * scale), level * 4) for level in levels}


def expected_seconds(totals: dict[int, int], runs: int, soak_seconds: float) -> float:
    """About how long the run takes on a 2-core AMD EPYC (from SECONDS_PER_REQUEST)."""
    per_run = sum((total + warm_up(total, level)) * costs.get(level, max(costs.values()))
                  for level, total in totals.items() for costs in SECONDS_PER_REQUEST.values())  # fmt: skip
    return STARTUP_SECONDS + runs * per_run + soak_seconds


def run(*, soak_seconds: float = 600, soak_rate: float = 50, levels: tuple[int, ...] = LEVELS, runs: int = RUNS,
        scale: float = 1.0) -> dict[str, Any]:  # fmt: skip
    """Every system at every level ``runs`` times: at each level run 1 of every system, then
    run 2, ..., the systems' order turned by one each run (so a load that comes and goes on a
    shared machine weighs on them alike); then the soak."""
    from middleware.testing import RedisServer, free_port

    totals = requests_per_run(levels, scale)
    print(f"  expected: about {expected_seconds(totals, runs, soak_seconds) / 60:.0f} min on a 2-core AMD EPYC", flush=True)
    began = time.monotonic()
    results: dict[str, Any] = {"runs": [], "levels": levels, "repeats": runs, "requests": totals}
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
                systems: list[tuple[str, str, dict[str, str]]] = [
                    ("direct", f"{mock}/chat/completions", {}),
                    (ENDPOINT, f"http://127.0.0.1:{serve_port}/v1/chat/completions", {}),
                    (PROXY, f"http://127.0.0.1:{proxy_port}/v1/chat/completions", {"Authorization": f"Bearer {MASTER_KEY}"}),
                ]
                for level in levels:
                    for number in range(1, runs + 1):
                        turned = (number - 1) % len(systems)
                        for name, url, headers in systems[turned:] + systems[:turned]:
                            print(f"  {(time.monotonic() - began) / 60:4.1f} min  {level} clients, run {number} of {runs}, "
                                  f"{name}: {totals[level]} paired requests", flush=True)  # fmt: skip
                            result = measure(url, name, level, totals[level], headers, f"L{level}r{number}", systems[0][1])
                            result.number = number
                            results["runs"].append(result)
                results["turns"] = count_turns(redis.url, [r for r in results["runs"] if r.system == ENDPOINT])
                if soak_seconds > 0:
                    print(f"  {(time.monotonic() - began) / 60:4.1f} min  soak: {soak_seconds:g} s at {soak_rate:g} requests/s",
                          flush=True)  # fmt: skip
                    results["soak"] = soak(systems[1][1], serve.pid, soak_seconds, soak_rate, 16)
                    results["soak_settings"] = (soak_seconds, soak_rate)
    results["seconds"] = time.monotonic() - began
    return results


def _commit() -> str:
    from benchmarks.stamps import commit

    return commit()


# --- the report --------------------------------------------------------------------------------

# What the verdicts compare, and whether more is better.
MEASURES: tuple[tuple[str, Callable[[Run], float], bool], ...] = (
    ("requests/s", lambda r: r.throughput, True),
    ("added p50", lambda r: r.added_ms(0.5), False),
    ("added p99", lambda r: r.added_ms(0.99), False),
)


def _ms(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _spread(values: list[float], show: Callable[[float], str]) -> str:
    """The median of ``values``, with their range when there are several."""
    if len(values) < 2:
        return show(values[0]) if values else ""
    low, high = min(values), max(values)
    return f"{show(statistics.median(values))} ({show(low)}{' to ' if low < 0 else '–'}{show(high)})"


def verdict(ours: list[Run], theirs: list[Run], value: Callable[[Run], float], higher: bool) -> str:
    """Run k of the endpoint against run k of the proxy: "beats" or "loses" only when every
    run says so, otherwise "mixed (k of n)", k the runs the endpoint did better in."""
    by_number = {r.number: r for r in theirs}
    pairs = [(value(a), value(by_number[a.number])) for a in ours if a.number in by_number]
    if not pairs:
        return "n/a"
    better = sum((a > b) if higher else (a < b) for a, b in pairs)
    worse = sum((a < b) if higher else (a > b) for a, b in pairs)
    return "beats" if better == len(pairs) else "loses" if worse == len(pairs) else f"mixed ({better} of {len(pairs)})"


def render(results: dict[str, Any], command: str) -> str:
    runs: list[Run] = results["runs"]
    repeats: int = results["repeats"]
    levels: tuple[int, ...] = results["levels"]

    def of(system: str, level: int) -> list[Run]:
        return sorted((r for r in runs if r.system == system and r.concurrency == level), key=lambda r: r.number)

    sizes = ", ".join(f"{results['requests'][level]:,}" for level in levels)
    at = ", ".join(map(str, levels))
    share = max((r.direct_share for r in runs if r.system != "direct"), default=0.0)
    lines = [
        SECTION,
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {_commit()} with `{command}` "
        f"(see `benchmarks/load.py`; the whole run took {results['seconds'] / 60:.0f} min). A mock OpenAI-compatible "
        "upstream on loopback answers at once; each system is one process forwarding to it (the endpoint with a real "
        "redis-server), and N clients each send one request after another, a new message in a session of their own. "
        f"Each level is run {repeats} times, interleaved (run 1 of every system, then run 2, ...), each run {sizes} requests "
        f"(at {at} clients) after a warm-up; the table gives the median of the runs and, in brackets, their range. "
        "**Added latency** is measured per request: the client sends each request to the mock directly as well, "
        "just before or just after it (alternately), and the request's added latency is its time through the system "
        "minus that direct call's; p50 and p99 are over those differences (for the direct row, the mock paired with itself: "
        "the pairing's own noise). **Requests/s** counts the system's answered calls over the run's wall time; the clients "
        f"also wait for their paired direct calls, {share:.1%} of their time at most in the endpoint's and the proxy's runs, "
        "so both rates are about that much below what the same clients would drive unpaired (the direct row counts one call "
        "of each pair). All processes share this machine's 2 cores, the load generator included, so the figures compare "
        "the systems rather than bound them.",
        "",
        "| clients | system | requests/s | added p50 ms | added p99 ms | errors |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for level in levels:
        for system in ("direct", ENDPOINT, PROXY):
            these = of(system, level)
            if not these:
                continue
            errors, direct_errors = sum(r.errors for r in these), sum(r.direct_errors for r in these)
            failed = f"{errors}" + (f" (+{direct_errors} direct)" if direct_errors else "")
            lines.append(f"| {level} | {system} | {_spread([r.throughput for r in these], lambda v: f'{v:,.0f}')} "
                         f"| {_spread([r.added_ms(0.5) for r in these], _ms)} | {_spread([r.added_ms(0.99) for r in these], _ms)} "
                         f"| {failed} |")  # fmt: skip
    lines += ["", f'**Against LiteLLM\'s proxy**, run by run (run k of the endpoint against run k of the proxy): "beats" or '
                  f'"loses" only where all {repeats} runs agree, otherwise "mixed (k of {repeats})", k the runs the endpoint did better in.', ""]  # fmt: skip
    for level in levels:
        ours, theirs = of(ENDPOINT, level), of(PROXY, level)
        said = "; ".join(f"{name} {verdict(ours, theirs, value, higher)}" for name, value, higher in MEASURES)
        lines.append(f"- {level} client{'s' if level != 1 else ''}: {said}.")
    turns = results.get("turns")
    if turns:
        lines += ["", f"**Turns.** The endpoint answered {turns['answered']:,} turns in its {repeats} runs; Redis holds {turns['recorded']:,} "
                      f"turn records (turn counters: {turns['turn_counters']:,}): **{turns['lost']} lost, {turns['duplicated']} duplicated**."]  # fmt: skip
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
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs of each level (default {RUNS})")
    parser.add_argument("--scale", type=float, default=1.0, help="requests per run, as a fraction of the default counts")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = parser.parse_args(argv)
    command = "python -m benchmarks load" + "".join(f" {a}" for a in argv if a != "--no-write")
    results = run(soak_seconds=args.soak_seconds, soak_rate=args.soak_rate, runs=args.runs, scale=args.scale)
    section = render(results, command)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", section)
    print(section)

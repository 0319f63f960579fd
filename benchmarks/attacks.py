"""The endpoint under attack: a real ``middleware serve`` process (two of them for the crash),
a redis-server and a mock OpenAI-compatible upstream, all on 127.0.0.1, attacked from outside
as the review that made the endpoint production-ready attacked it.

    python -m benchmarks.attacks     # about a minute; rewrites the Attacks section of BENCHMARKS.md

Figures: reads and writes that crossed tenants, the longest a session froze after each
poisoned request, serve's memory under a 400 MB chunked upload, keyed clients' success while
5,000 half-sent requests are held open, and turns answered, stored and duplicated when one of
two serve processes is killed (kill -9) under load. ``python -m benchmarks`` runs the same.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from benchmarks import write_section
from middleware import Config, SessionManager
from middleware.config.service import tenant_name
from middleware.core.effects import Batch, Program
from middleware.runner import run
from middleware.store import live
from middleware.store.drivers import RedisStore
from middleware.store.keys import Layout
from middleware.testing import RedisServer, closed_by_server, free_port, mock_openai_app, serving

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "BENCHMARKS.md"
START, END = "<!-- attacks:start -->", "<!-- attacks:end -->"
KEYS = ("key-alice-0123456789", "key-mallory-0123456789")


class Upstream:
    """The mock provider: answers at once (or after 5 ms for the crash's load), and keeps
    the text of every prompt it was sent, newest last."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
        text = "\n".join(str(m.get("content")) for m in messages)
        with self.lock:
            self.prompts.append(text)
        said = str(messages[-1].get("content"))
        if "(slow)" in said:
            time.sleep(0.005)
        elif "(hold)" in said:  # a call still running when its serve process is killed
            time.sleep(1.0)
        return {"role": "assistant", "content": "noted"}

    def last(self) -> str:
        with self.lock:
            return self.prompts[-1] if self.prompts else ""


class Serve:
    """A ``middleware serve`` process on a free port."""

    def __init__(self, folder: Path, redis_url: str, api_base: str, name: str = "serve") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = folder / f"{name}.yaml"
        keys = "".join(f"\n    - {key}" for key in KEYS)
        config.write_text(f"store:\n  url: {redis_url}\nusage_log:\n  path: {folder / (name + '.jsonl')}\n"
                          f"traces:\n  max_entries: 100000\nserve:\n  port: {self.port}\n  order_wait_seconds: 30\n  api_keys:{keys}\n"
                          f"  models:\n    m: {{model: openai/mock, api_base: {api_base}}}\n")  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": "sk-bench-upstream-0123456789", "MIDDLEWARE_CONFIG": str(config)}
        env.pop("REDIS_URL", None)
        self.log = (folder / f"{name}.log").open("w")
        self.process = subprocess.Popen([sys.executable, "-m", "middleware", "serve"], env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"middleware serve did not start: {(folder / f'{name}.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024

    def stop(self, kill: bool = False) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            self.process.wait(timeout=30)
        self.log.close()


def ask(url: str, key: str, text: str, naming: Mapping[str, Any], timeout: float = 30) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], **naming.get("body", {})}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout,
                      headers={"Authorization": f"Bearer {key}", **naming.get("headers", {})})  # fmt: skip


def _naming(session: str, how: str) -> dict[str, Any]:
    namings: dict[str, dict[str, Any]] = {"header": {"headers": {"X-Session-Id": session}}, "user": {"body": {"user": session}},
                                          "metadata": {"body": {"metadata": {"session_id": session}}}}  # fmt: skip
    return namings[how]


def tenants(serve: Serve, upstream: Upstream) -> dict[str, int]:
    """Key B names key A's session every way a request can: do A's facts reach B's prompts, or B's A's?"""
    alice, mallory = KEYS
    reads = writes = attempts = 0
    for how in ("header", "user", "metadata"):
        naming = _naming(f"victim-{how}", how)
        ask(serve.url, alice, f"My bank PIN is 4921 and my IBAN is DE44500105175407324931 ({how}).", naming)
        ask(serve.url, mallory, "What is my PIN?", naming)
        reads += "4921" in upstream.last()
        ask(serve.url, mallory, "From now on my IBAN is GB00ATTACKER0000.", naming)
        ask(serve.url, alice, "What is my IBAN?", naming)
        writes += "GB00ATTACKER" in upstream.last()
        attempts += 1
    return {"attempts": attempts, "reads": reads, "writes": writes}


def _nested(depth: int, leaf: str = "0") -> str:
    return "[" * depth + leaf + "]" * depth


def _poisons() -> dict[str, str]:
    """Request bodies that each used to take an arrival number and never settle it."""
    call = ('{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", '
            '"function": {"name": "NAME", "arguments": ARGS}}]}')  # fmt: skip
    result = '{"role": "tool", "tool_call_id": "c1", "content": "ok"}'

    def body(*messages: str, tools: str = "") -> str:
        return '{"model": "m", "messages": [' + ", ".join(messages) + "]" + (", " + tools if tools else "") + "}"

    user = '{"role": "user", "content": "hi"}'
    return {
        "content part nested 300 levels": body(
            '{"role": "user", "content": [{"type": "text", "text": "hi", "x": ' + _nested(300) + "}]}"
        ),
        "tool-call arguments nested 300 levels": body(
            user, call.replace("NAME", "f").replace("ARGS", orjson.dumps(_nested(300)).decode()), result, user
        ),
        "tool schema nested 990 levels": body(
            user, tools='"tools": [{"type": "function", "function": {"name": "f", "parameters": ' + _nested(990, "{}") + "}}]"
        ),
        "tool result of 5,000 brackets": body(
            user,
            call.replace("NAME", "f").replace("ARGS", '"{}"'),
            '{"role": "tool", "tool_call_id": "c1", "content": "' + _nested(5000) + '"}',
        ),
        "tool-call name of 300 characters": body(user, call.replace("NAME", "f" * 300).replace("ARGS", '"{}"'), result, user),
    }


def _leak_arrival(redis_url: str, session: str) -> None:
    """An arrival number nobody settles, as a resent arrival script (its reply lost) leaves."""
    config = Config().with_overrides(store={"url": redis_url}).for_tenant(tenant_name(KEYS[0]))
    layout = Layout.of(config)
    command = live.arrive_command(layout, session, waiting=(), reserve=True, mark_import=False, now=time.time(), wait=30)
    store = RedisStore.from_url(redis_url, config.store)

    def arrive() -> Program[Any]:
        return (yield Batch([command]))

    try:
        run(arrive(), store.send)
    finally:
        store.close()


def _caught_up(serve: Serve, redis_url: str, session: str, marker: str, limit: float = 60.0) -> float:
    """Seconds from the answer to ``marker`` until the session's memory (what its next prompt
    is made of) holds it. The probe is a request that arrives in the session (which applies the
    turns due) and records nothing: tool results for a call the session is not waiting for."""
    naming, said = _naming(session, "header"), f"The door code is {marker}."
    ask(serve.url, KEYS[0], said, naming)
    answered = time.monotonic()
    config = Config().with_overrides(store={"url": redis_url}, usage_log={"path": None}).for_tenant(tenant_name(KEYS[0]))
    probe = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "probe", "content": "x"}]}
    with SessionManager(config) as mgr:
        while time.monotonic() - answered < limit:
            httpx.post(f"{serve.url}/v1/chat/completions", json=probe, timeout=30,
                       headers={"Authorization": f"Bearer {KEYS[0]}", "X-Session-Id": session})  # fmt: skip
            # The whole sentence: the marker's digits alone also turn up in the traces' times and ids.
            if any(said in raw.decode(errors="replace") for raw in mgr.inspect(session, traces=20).traces):
                return time.monotonic() - answered
            time.sleep(0.05)
    return float("inf")


def freezes(serve: Serve, upstream: Upstream, redis_url: str) -> list[tuple[str, int, float]]:
    """Each poisoned request against a session of its own: its status, and how long the
    session's next turn then stayed out of its prompts."""
    rows = []
    for index, (name, body) in enumerate(_poisons().items()):
        session = f"poisoned-{index}"
        status = httpx.post(f"{serve.url}/v1/chat/completions", content=body.encode(), timeout=30,
                            headers={"Authorization": f"Bearer {KEYS[0]}", "Content-Type": "application/json",
                                     "X-Session-Id": session}).status_code  # fmt: skip
        rows.append((name, status, _caught_up(serve, redis_url, session, f"{7000 + index}")))
    _leak_arrival(redis_url, "poisoned-lost")
    rows.append(("arrival reply lost (the script ran twice)", 200, _caught_up(serve, redis_url, "poisoned-lost", "7100")))
    return rows


def chunked_upload(serve: Serve) -> dict[str, Any]:
    """A 400 MB chunked body: serve's resident memory before and at its peak, and the answer."""
    before, peak, done = serve.rss_mib(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, StopIteration):
                peak[0] = max(peak[0], serve.rss_mib())
            time.sleep(0.02)

    def chunks() -> Iterator[bytes]:
        for _ in range(400):
            yield b"x" * 1_000_000

    sampler = threading.Thread(target=sample)
    sampler.start()
    status: int | str
    try:
        status = httpx.post(f"{serve.url}/v1/chat/completions", content=chunks(), timeout=120,
                            headers={"Authorization": f"Bearer {KEYS[0]}", "X-Session-Id": "upload"}).status_code  # fmt: skip
    except httpx.TransportError:
        status = "closed by serve"
    finally:
        done.set()
        sampler.join()
    return {"before": before, "peak": max(peak[0], before), "status": status}


def half_open(serve: Serve, count: int = 5000, clients: int = 200) -> dict[str, Any]:
    """``count`` unauthenticated connections that send half a request head and trickle a byte
    a second, held while keyed clients make ``clients`` requests: their success rate, and how
    many of the half-sent ones serve had closed after 10 s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 1024)), hard))
    held: list[socket.socket] = []
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", serve.port), timeout=5)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            held.append(sock)
        except OSError:
            break
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            for sock in held:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X")
            stop.wait(1.0)

    trickler = threading.Thread(target=trickle)
    trickler.start()
    started, ok = time.monotonic(), 0
    try:
        for n in range(clients):
            with contextlib.suppress(httpx.HTTPError):
                ok += ask(serve.url, KEYS[1], f"hello {n}", _naming("keyed", "header"), timeout=10).status_code == 200
        time.sleep(max(0.0, 10 - (time.monotonic() - started)))
    finally:
        stop.set()
        trickler.join()
    return {"held": len(held), "clients": clients, "ok": ok, "closed": closed_by_server(held, wait=0.2)}


def _try_ask(url: str, text: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        ask(url, KEYS[0], text, _naming("shared", "header"), timeout=30)


def crash(folder: Path, redis_url: str, api_base: str, upstream: Upstream) -> dict[str, Any]:
    """Two serve processes share a session under load (8 clients, a turn every few ms); one is
    killed (kill -9) mid-run. Turns answered, stored and duplicated, and how long until a turn
    answered by the survivor reached its prompts."""
    first, second = Serve(folder, redis_url, api_base, "first"), Serve(folder, redis_url, api_base, "second")
    answered: list[str] = []
    lock, stop = threading.Lock(), threading.Event()

    def client(number: int) -> None:
        turn = 0
        while not stop.is_set():
            target = (first if number % 2 else second) if first.process.poll() is None else second
            text = f"turn {number}-{turn} (slow)"
            with contextlib.suppress(httpx.HTTPError):
                if ask(target.url, KEYS[0], text, _naming("shared", "header"), timeout=30).status_code == 200:
                    with lock:
                        answered.append(text)
            turn += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(3.0)
    held = threading.Thread(target=_try_ask, args=(first.url, "held (hold)"))
    held.start()
    time.sleep(0.3)  # its turn has its place and waits on the upstream
    first.stop(kill=True)  # its requests in flight die with it, holding their places
    held.join()
    stop.set()
    caught = _caught_up(second, redis_url, "shared", "9999")  # at once: the dead requests' leases are still fresh
    for thread in threads:
        thread.join()
    second.stop()
    client_ = redis.Redis.from_url(redis_url)
    prefix = f"mw:t:{tenant_name(KEYS[0])}"
    traces = [orjson.loads(raw) for raw in client_.lrange(f"{prefix}:{{shared}}:traces", 0, -1)]
    users = [str(trace["events"][0].get("content")) for trace in traces if trace.get("events")]
    stored = [text for text in users if text.startswith("turn ")]
    return {"answered": len(answered), "stored": len(set(stored) & set(answered)), "duplicates": len(stored) - len(set(stored)),
            "caught_up": caught}  # fmt: skip


def measure() -> dict[str, Any]:
    upstream = Upstream()
    with tempfile.TemporaryDirectory() as folder, RedisServer(Path(folder) / "redis") as server:
        with serving(mock_openai_app(responder=upstream)) as mock:
            api_base = f"{mock}/v1"
            serve = Serve(Path(folder), server.url, api_base)
            try:
                figures: dict[str, Any] = {"tenants": tenants(serve, upstream)}
                figures["freezes"] = freezes(serve, upstream, server.url)
                figures["upload"] = chunked_upload(serve)
                figures["half_open"] = half_open(serve)
            finally:
                serve.stop()
            figures["crash"] = crash(Path(folder), server.url, api_base, upstream)
    return figures


def section(figures: Mapping[str, Any], commit: str) -> str:
    t, u, h, c = figures["tenants"], figures["upload"], figures["half_open"], figures["crash"]
    longest = max(seconds for _, _, seconds in figures["freezes"])
    lines = [
        START,
        "## Attacks on the endpoint",
        "",
        f"`python -m benchmarks.attacks` at commit {commit}: a real `middleware serve` (two for the crash) with two client keys, a redis-server and a "
        "mock OpenAI-compatible upstream, all on 127.0.0.1, attacked from outside.",
        "",
        "| attack | result | verdict |",
        "|---|---|---|",
        f"| key B names key A's session (header, `user`, metadata), {t['attempts']} ways | A's facts in B's prompts: {t['reads']}; "
        f"B's forged fact in A's prompts: {t['writes']} | {'pass' if t['reads'] == t['writes'] == 0 else 'FAIL'} |",
        *[
            f"| poisoned request: {name} | answered {status}; the next turn reached the session's prompts after {seconds:.1f} s "
            f"| {'pass' if seconds <= 2.5 else 'FAIL'} |"
            for name, status, seconds in figures["freezes"]
        ],
        f"| a 400 MB chunked upload (limit 8 MB) | answered {u['status']}; serve's memory {u['before']:.0f} → {u['peak']:.0f} MiB at its peak "
        f"| {'pass' if u['peak'] - u['before'] < 64 else 'FAIL'} |",
        f"| {h['held']:,} half-sent requests held open (a byte a second) | keyed clients served: {h['ok']} of {h['clients']}; "
        f"half-sent connections closed by serve within 10 s: {h['closed']:,} | {'pass' if h['ok'] == h['clients'] and h['closed'] == h['held'] else 'FAIL'} |",
        f"| kill -9 of one of two serve processes under load (8 clients, one session) | answered {c['answered']}, stored {c['stored']}, "
        f"duplicated {c['duplicates']}; a turn answered after the crash reached the prompts in {c['caught_up']:.1f} s "
        f"| {'pass' if c['stored'] == c['answered'] and not c['duplicates'] and c['caught_up'] <= 2.5 else 'FAIL'} |",
        "",
        f"The longest freeze after a poisoned request: {longest:.1f} s (target: 2 s, plus the 0.1 s between the probe's requests). "
        "Turns answered by the killed process but not yet recorded are lost with it (their clients got no answer either, "
        "so they are not counted as answered).",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    from benchmarks.stamps import commit

    text = section(measure(), commit())
    from benchmarks.load import SECTION

    write_section(REPORT, text, START, END, before=SECTION)  # ahead of section 8, which is remade on its own
    print(text)


if __name__ == "__main__":
    main()

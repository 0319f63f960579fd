"""The memory inspector's JSON API (and the views under it), over both managers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from middleware import AsyncSessionManager, Config, SessionManager, ToolCall
from middleware.demo.device import LAB
from middleware.inspector.app import create_app
from middleware.inspector.view import conversation_view
from middleware.store.keys import session_keys

# The inspector answers only to loopback names by default (DNS rebinding): tests speak to it there.
LOCAL = "http://127.0.0.1:8300"


@pytest.fixture
def mgr(atlas: Config, store_url: str, tmp_path: Path) -> Iterator[SessionManager]:
    LAB.reset()
    with SessionManager(atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")}), redis_url=store_url) as manager:
        sid = manager.resolve_session("alice", "atlas")
        manager.manage_notes("alice", "atlas", "overwrite", content="## Devices\n- device1")
        for request in [
            "take control of device1 on sunri-pi1",
            "navigate to watchlist on google_tv",
            "goto shop",
            "check current node",
        ]:
            manager.chat(sid, request, model="scripted/atlas")
        for i in range(25):
            manager.record_turn(f"bulk-{i:02d}", user=f"hello {i}", assistant="hi")
        manager.sid = sid  # type: ignore[attr-defined]
        yield manager


@pytest.fixture
def client(mgr: SessionManager, face: str) -> Iterator[TestClient]:
    """The inspector over the store ``mgr`` filled, served by a manager of the face under test."""
    if face == "sync":
        yield TestClient(create_app(mgr), base_url=LOCAL)
        return
    amgr = AsyncSessionManager(mgr.config)
    with TestClient(create_app(amgr), base_url=LOCAL) as client:  # one event loop for every request
        yield client
        client.portal.call(amgr.close)  # type: ignore[union-attr]


def test_health_checks_the_store(client: TestClient) -> None:
    """/api/health answers ok only after the store did."""
    health = client.get("/api/health")
    assert health.status_code == 200 and health.json()["ok"] is True and "Store(url=" in health.json()["store"]


def test_listing_is_newest_first_paged_and_clamped(client: TestClient, mgr: SessionManager) -> None:
    """Pages of sessions, newest first; page numbers below 1 mean page 1; sizes are bounded."""
    first = client.get("/api/sessions", params={"page_size": 10}).json()
    assert first["total"] == 26 and first["total_pages"] == 3 and len(first["entries"]) == 10
    updated = [e["updated_at"] for e in first["entries"]]
    assert updated == sorted(updated, reverse=True) and first["entries"][0]["session_id"] == "bulk-24"
    assert client.get("/api/sessions", params={"page": -5, "page_size": 10}).json()["page"] == 1
    assert client.get("/api/sessions", params={"page": 3, "page_size": 10}).json()["entries"][-1]["session_id"] == mgr.sid  # type: ignore[attr-defined]
    assert client.get("/api/sessions", params={"page_size": 10_000}).json()["page_size"] == 200
    assert client.get("/api/sessions", params={"page": "two"}).status_code == 400


def test_search_by_session_id_substring_and_what_each_holds(client: TestClient, mgr: SessionManager) -> None:
    """search filters by id substring; each entry says what the session holds and whose it is."""
    found = client.get("/api/sessions", params={"search": "alice/"}).json()
    assert [e["session_id"] for e in found["entries"]] == [mgr.sid]  # type: ignore[attr-defined]
    entry = found["entries"][0]
    assert (entry["turns"], entry["user"], entry["agent"]) == (4, "alice", "atlas")
    assert (
        entry["context_keys"] == 3 and entry["summary_lines"] == 3 and entry["recent_messages"] == 2
    )  # 4 turns: 3 older, 1 recent
    assert client.get("/api/sessions", params={"search": "[*?"}).json()["total"] == 0  # glob characters are literal


def test_session_view_includes_every_part_by_default(client: TestClient, mgr: SessionManager) -> None:
    """Context, summary, recent, notes, traces, the conversation and the last prompt."""
    view = client.get("/api/session", params={"id": mgr.sid}).json()  # type: ignore[attr-defined]
    assert view["owner"] == {"user": "alice", "agent": "atlas"} and view["turns"] == 4
    assert view["context"]["userinterface_name"] == "google_tv"
    assert len(view["summary"]) == 3 and view["recent"][0]["content"] == "check current node"
    assert view["notes"] == "## Devices\n- device1"
    assert [e["kind"] for e in view["conversation"][:4]] == ["message", "tool", "message", "message"]
    tool = view["conversation"][1]
    assert tool["tool"] == "take_control" and tool["ok"] is True and "control_session" in tool["result"]
    prompt = view["prompt"]
    assert prompt["messages"][-1]["content"] == "check current node"
    assert prompt["tokens"]["total"] > prompt["tokens"]["current"] and prompt["full_history_tokens"] > 0
    assert view["warnings"] == []


def test_include_flags_and_limits(client: TestClient, mgr: SessionManager) -> None:
    """include picks parts (context brings the keys set earlier and the keys' earlier values
    with it); trace and conversation limits keep the newest entries."""
    view = client.get("/api/session", params={"id": mgr.sid, "include": "context,traces", "trace_limit": 3}).json()  # type: ignore[attr-defined]
    assert set(view) - {"session_id", "turns", "full_tokens", "created_at", "updated_at", "owner", "warnings"} == {
        "context",
        "earlier",
        "context_history",
        "traces",
    }
    assert [t["type"] for t in view["traces"]] == ["tool_call", "tool_result", "assistant"]
    limited = client.get("/api/session", params={"id": mgr.sid, "include": "conversation", "conversation_limit": 2}).json()  # type: ignore[attr-defined]
    assert [e["kind"] for e in limited["conversation"]] == ["tool", "message"]
    assert client.get("/api/session", params={"id": mgr.sid, "include": "everything"}).status_code == 400  # type: ignore[attr-defined]
    many = client.get("/api/session", params={"id": mgr.sid, "include": ",".join(f"x{i}" for i in range(4_000))})  # type: ignore[attr-defined]
    assert many.status_code == 400 and len(many.content) < 300  # the unknown names are quoted cut short
    assert client.get("/api/session", params={"id": mgr.sid, "trace_limit": "many"}).status_code == 400  # type: ignore[attr-defined]


def test_conversation_collapses_calls_and_keeps_orphans() -> None:
    """A call and its result become one entry; a result without its call stays an orphan."""
    traces = [
        {"type": "user", "content": "hi", "ts": 1},
        {"type": "tool_result", "call_id": "gone", "tool": "old", "result": "r0", "ok": True, "ts": 1},
        {"type": "tool_call", "call_id": "a", "tool": "nav", "arguments": "{}", "ts": 2},
        {"type": "tool_call", "call_id": "b", "tool": "cur", "arguments": "{}", "ts": 2},
        {"type": "tool_result", "call_id": "b", "tool": "cur", "result": "rb", "ok": True, "ts": 2},
        {"type": "tool_result", "call_id": "a", "tool": "nav", "result": "ra", "ok": False, "ts": 2},
        {"type": "assistant", "content": "done", "ts": 3},
    ]
    view = conversation_view(traces)
    assert [e["kind"] for e in view] == ["message", "tool_result_orphan", "tool", "tool", "message"]
    assert (view[2]["tool"], view[2]["result"], view[2]["ok"]) == ("nav", "ra", False)
    assert (view[3]["tool"], view[3]["result"]) == ("cur", "rb")
    assert [e["kind"] for e in conversation_view(traces, collapse=False)].count("tool_result") == 3


def test_corrupt_records_give_partial_results_not_errors(client: TestClient, mgr: SessionManager) -> None:
    """Garbage in traces, the stored prompt and the session's own keys: 200 with warnings."""
    keys = session_keys("mw", mgr.sid)  # type: ignore[attr-defined]
    redis = mgr.store.client
    redis.rpush(keys.traces, "not json", json.dumps({"no": "type"}), json.dumps([1, 2]))
    redis.set(keys.prompt, "{broken")
    redis.rpush(keys.recent, b"\xff\xfe")
    redis.zadd(keys.ctx, {"no separator": 1})
    response = client.get("/api/session", params={"id": mgr.sid})  # type: ignore[attr-defined]
    assert response.status_code == 200
    view = response.json()
    assert view["prompt"] is None and view["context"]["userinterface_name"] == "google_tv"
    kinds = {w.split(":")[0] for w in view["warnings"]}
    assert kinds == {"traces", "prompt", "recent", "ctx"}
    assert view["conversation"][-1]["kind"] == "message"  # the good traces still show
    redis.delete(keys.traces)
    redis.set(keys.traces, "a string, not a list")
    partial = client.get("/api/session", params={"id": mgr.sid}).json()  # type: ignore[attr-defined]
    assert partial["traces"] == [] and any(w.startswith("traces: unreadable") for w in partial["warnings"])


def test_unknown_and_invalid_sessions(client: TestClient) -> None:
    """An unknown session is 404; an invalid id is 400, both with a JSON error."""
    missing = client.get("/api/session", params={"id": "nobody"})
    assert missing.status_code == 404 and "nobody" in missing.json()["error"]
    assert "expected a session id as /api/sessions lists them" in missing.json()["error"]  # found: it said only "no session"
    invalid = client.get("/api/session", params={"id": "a\nb"})
    assert invalid.status_code == 400 and "control character (U+000A)" in invalid.json()["error"]
    assert client.get("/api/session").status_code == 400


def test_the_page_is_self_contained(client: TestClient) -> None:
    """The page loads nothing from elsewhere."""
    import re

    page = client.get("/").text
    assert "<title>Memory inspector" in page and "/api/sessions" in page
    assert "http://" not in page and "https://" not in page
    references = re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', page)
    assert references and all(ref.startswith("data:") for ref in references)  # the favicon, inline


def test_a_token_guards_every_route(mgr: SessionManager) -> None:
    """With a token, requests need it as a bearer token or a query parameter."""
    guarded = TestClient(create_app(mgr, token="s3cret"), base_url=LOCAL)
    assert guarded.get("/api/sessions").status_code == 401
    assert guarded.get("/").status_code == 401
    assert guarded.get("/api/sessions", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert guarded.get("/api/sessions", params={"token": "s3cret"}).status_code == 200
    assert guarded.get("/api/sessions", params={"token": "wrong"}).status_code == 401


def test_a_non_ascii_token_works_in_the_header(mgr: SessionManager) -> None:
    """Found: with the token 'pässwörd', `Authorization: Bearer pässwörd` from curl (UTF-8
    bytes, which Starlette decodes as latin-1) was a 401 while ?token= passed. The header's
    bytes are compared with the token's UTF-8 bytes, beyond latin-1 too."""
    for token in ["pässwörd", "pässwörd 密码"]:
        guarded = TestClient(create_app(mgr, token=token), base_url=LOCAL)
        assert guarded.get("/api/sessions", headers={"Authorization": f"Bearer {token}".encode()}).status_code == 200
        assert guarded.get("/api/sessions", params={"token": token}).status_code == 200
        assert guarded.get("/api/sessions", headers={"Authorization": b"Bearer " + token.encode()[:-1]}).status_code == 401
    # On a real socket, byte for byte (the test client re-encodes headers as UTF-8): curl's
    # UTF-8 passes; the same text in latin-1 bytes is other bytes, not the token.
    import http.client
    from urllib.parse import urlsplit

    from tests.browser import serve

    with serve(create_app(mgr, token="pässwörd")) as url:
        for value, status in [("pässwörd".encode(), 200), ("pässwörd".encode("latin-1"), 401)]:
            connection = http.client.HTTPConnection("127.0.0.1", urlsplit(url).port, timeout=10)
            connection.request("GET", "/api/health", headers={"Host": "localhost", "Authorization": b"bearer " + value})
            assert connection.getresponse().status == status
            connection.close()


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(mgr: SessionManager, scheme: str) -> None:
    """Found: `Authorization: bearer tok123` was a 401. RFC 7235: the scheme is case-insensitive."""
    guarded = TestClient(create_app(mgr, token="tok123"), base_url=LOCAL)
    assert guarded.get("/api/sessions", headers={"Authorization": f"{scheme} tok123"}).status_code == 200
    assert guarded.get("/api/sessions", headers={"Authorization": f"{scheme}   tok123  "}).status_code == 200


def test_every_token_sent_must_be_right(mgr: SessionManager) -> None:
    """Found: a right header with ?token=wrong was a 401 and a wrong header with a right
    ?token= a 200, as one or the other was read. Now every token sent is compared, and all
    must be right; another scheme (a proxy's Basic) is not a token and is left alone."""
    guarded = TestClient(create_app(mgr, token="tok123"), base_url=LOCAL)
    right, wrong = {"Authorization": "Bearer tok123"}, {"Authorization": "Bearer nope"}
    assert guarded.get("/api/sessions", headers=right, params={"token": "wrong"}).status_code == 401
    assert guarded.get("/api/sessions", headers=wrong, params={"token": "tok123"}).status_code == 401
    assert guarded.get("/api/sessions", params=[("token", "tok123"), ("token", "wrong")]).status_code == 401
    assert guarded.get("/api/sessions", headers=right, params={"token": "tok123"}).status_code == 200
    basic = {"Authorization": "Basic dXNlcjpwdw=="}
    assert guarded.get("/api/sessions", headers=basic, params={"token": "tok123"}).status_code == 200
    assert guarded.get("/api/sessions", headers=basic).status_code == 401


@pytest.mark.parametrize("header", ["tok123", "Bearer", "Bearer ", "Basic tok123", "Bearertok123", "Token tok123"])
def test_a_token_without_the_bearer_scheme_is_refused(mgr: SessionManager, header: str) -> None:
    """Found: `Authorization: tok123` (no scheme) passed, though the docs and the CLI say
    `Authorization: Bearer <token>`. A 401 says how to send it and names the scheme."""
    guarded = TestClient(create_app(mgr, token="tok123"), base_url=LOCAL)
    refused = guarded.get("/api/sessions", headers={"Authorization": header})
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer ")
    assert "'Authorization: Bearer <token>'" in refused.json()["error"] and "?token=" in refused.json()["error"]


@pytest.mark.parametrize("token", ["", " Zq81-tok", "Zq81-tok ", "Zq81\nTok", "Zq81-tok\x7f", "\u2003Zq81-tok"])
def test_a_token_that_cannot_be_sent_is_refused_at_start(
    mgr: SessionManager, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty token (which matched a request without one), one with spaces at its ends (the
    header's are cut) or with control characters (no header carries them) is refused when the
    app is made, and by `middleware inspect` in one line."""
    import uvicorn
    from click.testing import CliRunner

    from middleware.cli import main
    from middleware.exceptions import InvalidInputError
    from middleware.testing import free_port

    monkeypatch.setattr(uvicorn, "run", lambda app, **options: None)  # never serve, whatever happens
    with pytest.raises(InvalidInputError, match="inspector token"):
        create_app(mgr, token=token)
    if token:  # click reads an empty variable as none given
        result = CliRunner().invoke(main, ["inspect", "--port", str(free_port())], env={"MIDDLEWARE_INSPECT_TOKEN": token})
        assert result.exit_code == 1 and "Error: The inspector token" in result.output and "Traceback" not in result.output
        assert "Zq81" not in result.output  # never printed


def test_every_response_carries_the_security_headers(mgr: SessionManager) -> None:
    """A Content-Security-Policy allowing only the page's own inline script and style (by
    hash) and fetches to its origin, no framing, no sniffing, no referrer: on the page, the
    API, and the 401 and 400 answers."""
    import base64
    import hashlib
    import re

    client = TestClient(create_app(mgr, token="tok"), base_url=LOCAL)
    page = client.get("/", params={"token": "tok"})
    responses = [page, client.get("/api/sessions", params={"token": "tok"}), client.get("/api/sessions"),
                 client.get("/api/sessions", headers={"host": "evil.example"})]  # fmt: skip
    assert [r.status_code for r in responses] == [200, 200, 401, 400]
    for response in responses:
        assert response.headers["x-frame-options"] == "DENY" and response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["content-security-policy"] == page.headers["content-security-policy"]
    policy = dict(part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";"))
    for tag in ["script", "style"]:
        (block,) = re.findall(rf"<{tag}>(.*?)</{tag}>", page.text, re.S)
        digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
        assert policy[f"{tag}-src"] == f"'sha256-{digest}'"
    assert policy["default-src"] == "'none'" and policy["connect-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in page.headers["content-security-policy"]


@pytest.mark.parametrize("route", ["/api/sessions", "/api/health", "/api/session?id=s"])
def test_an_unreachable_store_is_503_without_the_password(atlas: Config, face: str, route: str) -> None:
    """A dead Redis is a 503 naming the store, password masked, not a 500, on every route (health too)."""
    from middleware.testing import free_port

    config = atlas.with_overrides(store={"url": f"redis://:pw-42@127.0.0.1:{free_port()}/0", "timeout_seconds": 0.5})
    dead = SessionManager(config) if face == "sync" else AsyncSessionManager(config)
    with TestClient(create_app(dead), base_url=LOCAL) as client:
        response = client.get(route)
    assert response.status_code == 503 and "pw-42" not in response.text and "unreachable" in response.json()["error"]


def test_the_cli_refuses_to_expose_the_inspector_without_a_token() -> None:
    """Binding off loopback needs a token."""
    from click.testing import CliRunner

    from middleware.cli import main

    result = CliRunner().invoke(main, ["inspect", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--token" in result.output


def test_a_turn_record_missing_its_call_shows_an_orphan_result(atlas: Config, tmp_path: Path) -> None:
    """A stored turn whose tool call is missing (a partial write) keeps its result as an orphan."""
    config = atlas.with_overrides(usage_log={"path": None}, store={"url": f"memory://orphans-{tmp_path.name}"})
    with SessionManager(config) as mgr:
        mgr.record_turn("o", user="go", assistant="done", tool_calls=[ToolCall(name="nav", arguments={}, result={"ok": True})])
        keys = session_keys("mw", "o")
        record = json.loads(mgr.store.client.lindex(keys.traces, 0))
        record["events"] = [e for e in record["events"] if e["type"] != "tool_call"]
        mgr.store.client.lset(keys.traces, 0, json.dumps(record))
        view = (
            TestClient(create_app(mgr), base_url=LOCAL).get("/api/session", params={"id": "o", "include": "conversation"}).json()
        )
    assert [e["kind"] for e in view["conversation"]] == ["message", "tool_result_orphan", "message"]


def test_health_follows_a_server_that_stops_and_comes_back(atlas: Config, face: str, tmp_path: Path) -> None:
    """/api/health is ok while redis-server runs, 503 naming the store once it is stopped, and
    ok again after it restarts, all from one app and one manager. (The plan-layer issue had
    already made health ask the store; this keeps it so against a server that really stops.)"""
    from tests.conftest import RedisServer

    server = RedisServer(tmp_path / "redis")
    server.start()
    config = atlas.with_overrides(store={"url": server.url, "timeout_seconds": 0.5}, usage_log={"path": None})
    manager = SessionManager(config) if face == "sync" else AsyncSessionManager(config)
    try:
        with TestClient(create_app(manager), base_url=LOCAL) as client:
            assert client.get("/api/health").json()["ok"] is True
            server.stop()
            down = client.get("/api/health")
            assert down.status_code == 503 and "unreachable" in down.json()["error"] and str(server.port) in down.json()["error"]
            server.start()
            assert client.get("/api/health").json()["ok"] is True
            if isinstance(manager, AsyncSessionManager):
                client.portal.call(manager.close)  # type: ignore[union-attr]
    finally:
        server.stop()
        if isinstance(manager, SessionManager):
            manager.close()


@pytest.mark.parametrize("name", ["page", "page_size", "trace_limit", "conversation_limit"])
@pytest.mark.parametrize("value", ["99999999999999999999", "1000000001", "9" * 5_000, "2.5", "0x10", "١٢"])
def test_integer_parameters_beyond_bounds_are_400_naming_the_value(
    client: TestClient, mgr: SessionManager, name: str, value: str
) -> None:
    """Every integer parameter takes integers up to 1,000,000,000: anything else (a huge page,
    digits by the thousand, a fraction, hex, non-ASCII digits) is a 400 naming the parameter
    and the value, cut short, never a 503 or a megabyte of error."""
    route, params = ("/api/sessions", {}) if name.startswith("page") else ("/api/session", {"id": mgr.sid})  # type: ignore[attr-defined]
    response = client.get(route, params={**params, name: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"'{name}'" in error and "1,000,000,000" in error and len(response.content) < 400
    assert (value in error) if len(value) < 30 else (value[:15] in error and value not in error)


@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("127.0.0.1:8300", True),
        ("localhost:8300", True),
        ("LocalHost.", True),
        ("[::1]:8300", True),
        ("evil.example", False),
        ("evil.example:8300", False),
        ("127.0.0.1.evil.example", False),
        ("localhost@evil.example", False),
    ],
)
def test_only_loopback_names_are_answered_by_default(mgr: SessionManager, host: str, answered: bool) -> None:
    """A request naming another host is refused (400, naming it) before anything else, a valid
    token included: a page that rebinds its own name to 127.0.0.1 (DNS rebinding) cannot read
    a loopback inspector."""
    for app, headers in [(create_app(mgr), {}), (create_app(mgr, token="t0k"), {"Authorization": "Bearer t0k"})]:
        response = TestClient(app, base_url=LOCAL).get("/api/sessions", headers={**headers, "host": host})
        assert response.status_code == (200 if answered else 400), response.text
        if not answered:
            assert repr(host) in response.json()["error"] and "localhost" in response.json()["error"]


def test_the_hosts_answered_are_configurable(mgr: SessionManager) -> None:
    """allowed_hosts replaces the loopback names; "*" answers any host."""
    named = TestClient(create_app(mgr, allowed_hosts=["Inspector.Example.com", "[::1]"]), base_url=LOCAL)
    assert named.get("/api/sessions", headers={"host": "inspector.example.com:443"}).status_code == 200
    assert named.get("/api/sessions", headers={"host": "[::1]:8300"}).status_code == 200
    assert named.get("/api/sessions", headers={"host": "127.0.0.1:8300"}).status_code == 400
    anyone = TestClient(create_app(mgr, allowed_hosts=["*"]), base_url=LOCAL)
    assert anyone.get("/api/sessions", headers={"host": "evil.example"}).status_code == 200


def test_a_served_inspector_refuses_a_rebound_name(mgr: SessionManager) -> None:
    """Through uvicorn on a real socket, as a browser would send it after DNS rebinding."""
    import http.client
    from urllib.parse import urlsplit

    from tests.browser import serve

    with serve(create_app(mgr)) as url:
        port = urlsplit(url).port
        for host, status in [(f"attacker.example:{port}", 400), (f"localhost:{port}", 200)]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/api/sessions", headers={"Host": host})
            assert connection.getresponse().status == status
            connection.close()


def test_the_cli_does_not_print_the_token_and_answers_its_own_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """`middleware inspect` says where the token comes from without printing it, and serves an
    app that answers to loopback names, the address it binds and each --allowed-host."""
    import importlib

    import uvicorn
    from click.testing import CliRunner

    from middleware.cli import main

    cli_main = importlib.import_module("middleware.cli.main")  # the module: middleware.cli.main is also the command
    served: dict[str, object] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(app=app, **options))
    # 192.0.2.10 is no address of this machine: the command's listen check would refuse it first.
    monkeypatch.setattr(cli_main, "_check_listen", lambda host, port: None)
    secret = "s3cret-Token-Value-Zq81"
    result = CliRunner().invoke(
        main,
        ["inspect", "--host", "192.0.2.10", "--allowed-host", "inspector.example.com"],
        env={"MIDDLEWARE_INSPECT_TOKEN": secret},
    )
    assert result.exit_code == 0, result.output
    assert (
        secret not in result.output and "MIDDLEWARE_INSPECT_TOKEN" in result.output and "http://192.0.2.10:8300/" in result.output
    )
    client = TestClient(served["app"], headers={"Authorization": f"Bearer {secret}"})  # type: ignore[arg-type]
    for host, status in [
        ("192.0.2.10:8300", 200),
        ("inspector.example.com", 200),
        ("localhost:8300", 200),
        ("evil.example", 400),
    ]:
        assert client.get("/api/health", headers={"host": host}).status_code == status
    flag = CliRunner().invoke(main, ["inspect", "--token", secret])
    assert flag.exit_code == 0 and secret not in flag.output and "--token" in flag.output

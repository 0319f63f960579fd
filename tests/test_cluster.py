"""Every session operation on a 3-master Redis Cluster the suite starts itself, on both faces."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from middleware import Config, StoreUnavailableError, ToolCall
from middleware.demo.device import LAB
from middleware.store.keys import session_keys
from middleware.testing import RedisCluster, free_port
from tests.conftest import Manager, concurrently, open_manager, require_binary

NAV = ToolCall(name="navigate_to_node", arguments={"userinterface_name": "google_tv", "node": "shop"}, result={"success": True})


@pytest.fixture
def cluster_config(atlas: Config, cluster_url: str, tmp_path: Path) -> Config:
    return atlas.with_overrides(store={"url": cluster_url, "cluster": True}, usage_log={"path": str(tmp_path / "u.jsonl")})


@pytest.fixture
def mgr(cluster_config: Config, face: str, loop: asyncio.AbstractEventLoop) -> Iterator[Manager]:
    with open_manager(face, cluster_config, loop) as manager:
        yield manager


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisCluster, str]]:
    """A 3-master cluster whose nodes also serve TLS (their bus too), and the rediss:// URL of
    its first node; set up through the plain ports."""
    cert, key = _certificate(tmp_path_factory.mktemp("tls"))
    tls = ("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
           "--tls-auth-clients", "no", "--tls-cluster", "yes")  # fmt: skip
    cluster = RedisCluster(
        tmp_path_factory.mktemp("tls-cluster"), binary=require_binary("redis-server"), cli=require_binary("redis-cli"), extra=tls
    )
    taken = {port for node in cluster.nodes for port in (node.port, node.port + 10_000)}  # not bound until started
    for node in cluster.nodes:
        # Redis refuses a port past 55535 on a cluster node, TLS ports too.
        port = next(port for port in iter(free_port, None) if port <= 55_535 and port not in taken)
        taken.add(port)
        node.extra = (*node.extra, "--tls-port", str(port))
    with cluster:
        yield cluster, f"rediss://127.0.0.1:{cluster.nodes[0].extra[-1]}?ssl_ca_certs={cert}"


def _certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files in ``folder``."""
    pytest.importorskip("cryptography")
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


def node_clients(cluster: RedisCluster) -> list[redis.Redis]:
    return [redis.Redis(host="127.0.0.1", port=node.port) for node in cluster.nodes]


def test_sessions_spread_over_nodes_and_each_lives_in_one_slot(mgr: Manager, redis_cluster: RedisCluster) -> None:
    """Many sessions land on every master; all keys of one session share a slot."""
    ids = [f"user-{i}" for i in range(30)]
    for sid in ids:
        mgr.record_turn(sid, user=f"hello from {sid}", assistant="hi", tool_calls=[NAV])
    holders = [c for c in node_clients(redis_cluster) if any(k != b"mw:sessions" for k in c.keys("mw:*"))]
    assert len(holders) == 3
    admin = node_clients(redis_cluster)[0]
    for sid in ids[:5]:
        slots = {admin.cluster("keyslot", key) for key in session_keys("mw", sid)}
        assert len(slots) == 1
    for sid in ids:
        state = mgr.get_state(sid)
        assert state.turns == 1 and state.recent[0]["content"] == f"hello from {sid}"


def test_every_operation_works_without_crossslot(mgr: Manager) -> None:
    """record (MULTI/EXEC), load, build, list, reset and chat all run on the cluster."""
    LAB.reset()
    for i in range(5):
        mgr.record_turn("s", user=f"go to node {i}", assistant=f"at {i}", tool_calls=[NAV])
    state = mgr.get_state("s")
    assert state.turns == 5 and len(state.summary) == 3 and len(state.recent) == 2
    assert mgr.build_messages("s", "next")[0]["content"].endswith("- userinterface_name: google_tv")
    page = mgr.list_sessions(search="s")
    assert [e.session_id for e in page.entries] == ["s"]
    result = mgr.chat("chat-1", "take control of device1 on sunri-pi1", model="scripted/atlas")
    assert result.recorded and mgr.get_state("chat-1").context["device_id"] == "device1"
    mgr.reset("s")
    assert mgr.get_state("s").turns == 0 and mgr.list_sessions(search="s").entries == []


def test_concurrent_writers_on_the_cluster_lose_nothing(mgr: Manager) -> None:
    """8 writers x 50 turns into one session on the cluster (threads, or tasks): the counter ends at 400."""
    concurrently(mgr, 8, lambda m, i: m.record_turn("hot", user=f"turn {i}", assistant="ok"), each=50)
    assert mgr.get_state("hot").turns == 400


def test_the_listing_index_is_written_outside_the_session_transaction(mgr: Manager, redis_cluster: RedisCluster) -> None:
    """The index key may live on another node; recording still succeeds and lists the session."""
    admin = node_clients(redis_cluster)[0]
    # Find a session whose slot differs from the index's slot.
    index_slot = admin.cluster("keyslot", "mw:sessions")
    sid = next(f"x{i}" for i in range(100) if admin.cluster("keyslot", session_keys("mw", f"x{i}").ctx) != index_slot)
    mgr.record_turn(sid, user="hi", assistant="hello")
    assert sid in [e.session_id for e in mgr.list_sessions().entries]


def test_notes_and_users_on_the_cluster(mgr: Manager) -> None:
    """Resolving a pair's session, editing notes (compare-and-set) and loading them work across slots."""
    sid = mgr.resolve_session("alice", "atlas")
    mgr.manage_notes("alice", "atlas", "append", content="- likes google_tv")
    concurrently(mgr, 10, lambda m, i: m.manage_notes("alice", "atlas", "append", content=f"- fact {i}"))
    assert "> - likes google_tv" in mgr.build_messages(sid, "hi")[0]["content"]
    assert len(mgr.notes("alice", "atlas").split("\n\n")) == 11
    assert mgr.ping() is True


def test_a_hung_node_costs_one_timeout_and_a_timed_out_write_says_the_turn_may_be_recorded(
    cluster_config: Config, redis_cluster: RedisCluster, face: str, loop: asyncio.AbstractEventLoop
) -> None:
    """A session's node that accepts and never answers (SIGSTOP): each call fails after one
    store.timeout_seconds, as on a single server (redis-py's cluster client retried the
    timeout, sending the write again and doubling the wait); a timed-out record says the
    turn may have been recorded, and it was: once."""
    _hung_node_costs_one_timeout(cluster_config, redis_cluster, face, loop)


def test_a_hung_node_of_a_tls_cluster_costs_one_timeout_too(
    atlas: Config, tls_cluster: tuple[RedisCluster, str], face: str, loop: asyncio.AbstractEventLoop
) -> None:
    """The same over rediss:// (redis-py brings its TLS connection class, which replaced the
    one that sends a hung node nothing more: each call waited two or three timeouts, and
    the timed-out turn was recorded three times)."""
    cluster, url = tls_cluster
    cluster.flush()
    config = atlas.with_overrides(store={"url": url, "cluster": True}, usage_log={"path": None})
    with open_manager(face, config, loop) as manager:  # the sessions are reached over TLS
        manager.record_turn("tls", user="goto shop", assistant="ok")
        assert manager.get_state("tls").turns == 1
    _hung_node_costs_one_timeout(config, cluster, face, loop)


def _hung_node_costs_one_timeout(config: Config, cluster: RedisCluster, face: str, loop: asyncio.AbstractEventLoop) -> None:
    timeout = 1.0
    config = config.with_overrides(store={"timeout_seconds": timeout})
    node = cluster.node_of(session_keys("mw", "hung")[0])
    assert node.proc is not None
    with open_manager(face, config, loop) as manager:
        manager.record_turn("hung", user="goto shop", assistant="ok", tool_calls=[NAV])
        os.kill(node.proc.pid, signal.SIGSTOP)
        try:
            for call, said in (
                (lambda: manager.record_turn("hung", user="goto home", assistant="ok"), "The turn may have been recorded"),
                (lambda: manager.get_state("hung"), "Timeout"),
            ):
                started = time.monotonic()
                with pytest.raises(StoreUnavailableError, match=said) as info:
                    call()
                assert timeout * 0.8 < time.monotonic() - started < timeout * 1.5
                assert ("may have been recorded" in str(info.value)) == (said != "Timeout")
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        cluster.wait_ok()
        state = manager.get_state("hung")
        assert state.turns == 2 and [m["content"] for m in state.recent[-2:]] == ["goto home", "ok"]

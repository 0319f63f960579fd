"""`middleware serve` on the command line: help, refusals, and worker processes sharing a store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner

from middleware import Config, SessionManager
from middleware.cli import main
from middleware.testing import free_port
from tests.conftest import wait_for_health


def test_serve_has_help() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "OpenAI-compatible endpoint" in result.output and "--workers" in result.output


def test_serve_refuses_another_address_without_client_keys() -> None:
    """Off loopback, clients must need a key: serve.api_keys first."""
    result = CliRunner().invoke(main, ["serve", "--host", "0.0.0.0"], env={"REDIS_URL": "", "MIDDLEWARE_CONFIG": ""})
    assert result.exit_code == 2 and "serve.api_keys" in result.output


def test_serve_refuses_workers_on_the_embedded_store() -> None:
    """memory:// lives in one process: several workers would each have their own."""
    result = CliRunner().invoke(main, ["serve", "--workers", "2"], env={"REDIS_URL": "", "MIDDLEWARE_CONFIG": ""})
    assert result.exit_code == 2 and "--workers needs a shared store" in result.output


@pytest.mark.parametrize("command", ["serve", "inspect"])
def test_a_port_in_use_is_an_error_before_any_banner(command: str) -> None:
    """Found: serve said it was serving on a port another process held, then failed. The
    port is tried first: one clear line, status 1, no banner."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, [command, "--port", str(port)], env={"REDIS_URL": "", "MIDDLEWARE_CONFIG": ""})
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1 port {port}: Address already in use" in result.output
    assert " on http" not in result.output


def test_an_address_this_machine_lacks_is_named() -> None:
    """Not an address of this machine (::2 is no interface's): named, with the reason."""
    result = CliRunner().invoke(main, ["inspect", "--host", "::2", "--token", "t" * 24],
                                env={"REDIS_URL": "", "MIDDLEWARE_CONFIG": ""})  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "cannot listen on ::2 port 8300: " in result.output and "Memory inspector on" not in result.output


@pytest.mark.slow
def test_workers_share_one_redis(real_redis_url: str, tmp_path: Path) -> None:
    """`middleware serve --workers 2`: the workers build their app from this command's config and store."""
    config = tmp_path / "serve.yaml"
    config.write_text(f"usage_log:\n  path: {tmp_path / 'usage.jsonl'}\n")
    port = free_port()
    env = {**os.environ, "REDIS_URL": real_redis_url}
    env.pop("MIDDLEWARE_CONFIG", None)
    process = subprocess.Popen([sys.executable, "-m", "middleware", "--config", str(config), "serve", "--port", str(port), "--workers", "2"],
                               env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "serve.log").open("w"))  # fmt: skip
    try:
        wait_for_health(f"http://127.0.0.1:{port}/health", lambda: process.poll() is None, tmp_path / "serve.log")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        for i in range(10):
            client.chat.completions.create(
                model="scripted/echo", messages=[{"role": "user", "content": f"m{i}"}], extra_headers={"X-Session-Id": "w"}
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
    with SessionManager(Config().with_overrides(store={"url": real_redis_url}, usage_log={"path": None})) as mgr:
        assert mgr.get_state("w").turns == 10
    assert len((tmp_path / "usage.jsonl").read_text().splitlines()) == 10  # the workers read the config file
    access = [line for line in (tmp_path / "serve.log").read_text().splitlines() if "serve.access" in line]
    assert len(access) == 10 and all("status=200" in line and "session='w'" in line for line in access)  # one line per request

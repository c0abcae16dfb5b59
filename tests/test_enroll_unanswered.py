"""The real `sonde enroll` against a server that takes the request and never answers, and against
a web server that is not a hub and answers an error page.

A hub that took the request may have enrolled the machine and used the token, so the timeout is
said as the Ctrl-C is (tests/test_enroll_interrupted.py), not as "cannot reach the hub": before,
it said `cannot reach the hub at URL: timed out`. A connect failure (nothing listening) is still
"cannot reach". Another web server's error page is said as `sonde login` says it, never printed:
before, `answered HTTP 501: <!DOCTYPE HTML> <html lang="en"> ...`.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from tests.bridge.test_login_not_a_hub import PAGE, web_server
from tests.e2e.procs import SONDE, base_env
from tests.ports import free_port
from tests.subprocs import run_any

pytestmark = pytest.mark.timeout(90)

TOKEN = "enr_" + "Q" * 32


def enroll(home: Path, hub_url: str) -> subprocess.CompletedProcess[str]:
    argv = [*SONDE, "enroll", "--hub", hub_url, "--name", "x1"]
    return run_any(argv, env=base_env(home), timeout=60, input=TOKEN + "\n")


def test_a_hub_that_took_the_request_and_never_answered_may_have_used_the_token(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        done = enroll(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")
    assert done.returncode == 1, done.stderr
    assert "cannot reach" not in done.stderr
    assert "did not answer within 15 s" in done.stderr
    assert "the hub may have enrolled this machine as x1 and used the token" in done.stderr
    assert "`sonde hub token create --name x1`" in done.stderr
    assert TOKEN not in done.stderr
    assert not (tmp_path / ".sonde").exists()


def test_nothing_listening_is_still_cannot_reach(tmp_path: Path) -> None:
    done = enroll(tmp_path, f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 1, done.stderr
    assert "cannot reach the hub at" in done.stderr
    assert "may have enrolled" not in done.stderr


@pytest.mark.parametrize("status", [501, 400, 500])
def test_another_servers_error_page_is_said_as_login_says_it_never_printed(
    tmp_path: Path, status: int
) -> None:
    with web_server("text/html", PAGE, status) as url:
        done = enroll(tmp_path, url)
    assert done.returncode == 1, done.stderr
    assert (
        f"{url} is not a Sonde hub's base URL: POST {url}/api/v1/agents/enroll answered {status}"
        in done.stderr
    )
    assert "an HTML page titled 'Welcome to nginx!' (server: nginx/1.24.0)" in done.stderr
    assert "Give the URL `sonde hub` prints as 'listening on'" in done.stderr
    assert "<html" not in done.stderr.lower()


def test_a_proxys_gateway_page_names_the_proxy_not_another_server(tmp_path: Path) -> None:
    with web_server("text/html", PAGE, 502) as url:
        done = enroll(tmp_path, url)
    assert done.returncode == 1, done.stderr
    assert (
        f"the hub at {url} did not enroll this machine: POST {url}/api/v1/agents/enroll answered 502"
        in done.stderr
    )
    assert "a proxy's answer (is the hub behind it down or slow?)" in done.stderr
    assert "is not a Sonde hub's base URL" not in done.stderr
    assert "<html" not in done.stderr.lower()


def test_something_speaking_no_http_is_said_as_reached_not_printed_raw(tmp_path: Path) -> None:
    """A database's port: it said `cannot reach the hub at URL: +OK redis-ish`, the remote bytes
    raw (an escape sequence among them would reach the terminal), though it was reached."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer_one() -> None:
            peer, _ = server.accept()
            with peer:
                peer.recv(65536)
                peer.sendall(b"+OK redis-ish \x1b[31m\r\n")

        thread = threading.Thread(target=answer_one, daemon=True)
        thread.start()
        done = enroll(tmp_path, f"http://127.0.0.1:{port}")
        thread.join(10)
    assert done.returncode == 1, done.stderr
    assert f"something at http://127.0.0.1:{port} took the connection but gave no HTTP answer" in done.stderr
    assert "\x1b" not in done.stderr
    assert "cannot reach" not in done.stderr

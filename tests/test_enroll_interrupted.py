"""Ctrl-C while a real `sonde enroll` waits for the hub's answer: it says the token may have been
used and that nothing was saved here, and the advice it gives, followed, enrolls the machine.

Between `sonde enroll` and a real hub sits a proxy that holds the request: the SIGINT is sent
once the whole request (the token in it) has reached the proxy, so nothing races. Then the
proxy passes the request on, as a network that delivered it late would: the hub enrolls the
machine and uses the token, though `sonde enroll` is gone. Before, it exited 130 saying
nothing, and a person could not tell whether the token was spent, or why the same command
then failed.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sonde.agent.config import load_config
from tests.e2e.procs import SONDE, RunningHub, base_env, running_hub
from tests.subprocs import run_any
from tests.test_cli_interrupts import TRIPWIRE

pytestmark = pytest.mark.timeout(90)

NAME = "web-9"


class HoldingProxy:
    """Takes one HTTP request on 127.0.0.1 and holds it: `request` is set once it is all there;
    `pass_on` sends it to ``upstream`` (host, port) and returns the answer."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.request = threading.Event()
        self.held = b""
        self._thread = threading.Thread(target=self._take_one, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _take_one(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while not self._complete():
                chunk = conn.recv(65536)
                if not chunk:
                    break
                self.held += chunk
            self.request.set()
            conn.recv(1)  # until the client goes away: it never gets an answer

    def _complete(self) -> bool:
        head, found, body = self.held.partition(b"\r\n\r\n")
        if not found:
            return False
        lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        return len(body) >= int(lengths[0].split(b":")[1]) if lengths else True

    def pass_on(self) -> bytes:
        with socket.create_connection(self.upstream, timeout=30) as upstream:
            upstream.sendall(self.held)
            answer = b""
            while chunk := upstream.recv(65536):  # the request says Connection: close
                answer += chunk
        return answer

    def close(self) -> None:
        self.listener.close()
        self._thread.join(5)


@contextmanager
def holding_proxy(hub: RunningHub) -> Iterator[HoldingProxy]:
    host, port = hub.url.removeprefix("http://").rsplit(":", 1)
    proxy = HoldingProxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.close()


def enroll(home: Path, hub_url: str, token: str) -> subprocess.CompletedProcess[str]:
    argv = [*SONDE, "enroll", "--hub", hub_url, "--token", token, "--name", NAME]
    return run_any(argv, env=base_env(home), timeout=60)


def test_ctrl_c_while_waiting_for_the_hub_says_the_token_may_be_used_and_what_to_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with running_hub(tmp_path) as hub, holding_proxy(hub) as proxy:
        token = hub.token()
        # the real entry point, with SIGINT as a shell leaves it for a command (no trap armed)
        argv = [sys.executable, "-c", TRIPWIRE, "import", "(none)", "enroll", "--hub", proxy.url]
        waiting = subprocess.Popen(
            [*argv, "--token", token, "--name", NAME],
            env=base_env(home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proxy.request.wait(30), "the request never reached the proxy"
            waiting.send_signal(signal.SIGINT)
            out, err = waiting.communicate(timeout=30)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait(5)
        assert waiting.returncode == 130, err
        assert out == ""
        assert "Traceback" not in err
        assert token not in err
        assert (
            "sonde enroll: warning: interrupted while waiting for the hub's answer: the hub may have enrolled this "
            f"machine as {NAME} and used the token, but nothing was saved here" in err
        ), err
        assert "run the same `sonde enroll` again" in err, err
        advice = f"`sonde hub token create --name {NAME}`"
        assert (
            f"if the hub answers that the token was already used, ask an admin for a new token for {NAME} ({advice})"
            in err
        ), err
        assert load_config(home / ".sonde" / "config.json") is None

        assert b" 201 " in proxy.pass_on().split(b"\r\n")[0]  # delivered late: the token is used now
        again = enroll(home, hub.url, token)
        assert again.returncode == 1, again.stderr
        assert "enrollment token was already used" in again.stderr
        renamed = enroll(home, hub.url, hub.token("--name", NAME))  # the advice, followed
        assert renamed.returncode == 0, renamed.stderr
        assert f"enrolled as {NAME}" in renamed.stderr

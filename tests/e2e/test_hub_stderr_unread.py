"""A hub whose stderr nobody reads for a while (a terminal paused with Ctrl-S, a log reader
that stopped reading) goes on serving, and stops at SIGTERM.

Regression: the hub wrote its log lines from the event loop, so the line that found the pipe
full blocked everything: no request answered, and SIGTERM not taken.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.e2e.procs import SONDE, base_env

PIPE_PAGE = 4096  # the pipe's size: a few dozen log lines fill it
URL_LINE = re.compile(rb"sonde hub listening on (\S+)")


def read_until_url(read_fd: int, timeout_s: float = 30.0) -> str:
    said = b""
    deadline = time.monotonic() + timeout_s
    while (match := URL_LINE.search(said)) is None:
        left = deadline - time.monotonic()
        assert left > 0, said.decode(errors="replace")
        if select.select([read_fd], [], [], left)[0]:
            chunk = os.read(read_fd, 65536)
            assert chunk, said.decode(errors="replace")  # the hub exited
            said += chunk
    return match.group(1).decode()


def test_a_hub_whose_stderr_is_not_read_answers_and_stops(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_PAGE)
    data_dir = tmp_path / "hubdata"
    args = ["hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)]
    hub = subprocess.Popen(
        [*SONDE, *args],
        env=base_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=write_fd,
    )
    os.close(write_fd)
    try:
        url = read_until_url(read_fd)
        for _ in range(200):  # each said in a log line (about 120 bytes): the pipe is full long before
            hub.send_signal(signal.SIGHUP)
            time.sleep(0.005)
        time.sleep(0.5)  # the last signals taken, their lines written or queued
        assert select.select([read_fd], [], [], 0)[0], "nothing waits in the pipe: the test proves nothing"
        answer = httpx.get(f"{url}/api/v1/health", timeout=10)
        assert answer.status_code == 200, answer.text
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(15) == 0
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait(5)
        os.close(read_fd)

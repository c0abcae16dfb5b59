"""End to end: an agent comes back at once after each of two hub restarts in a row.

A hub told to stop closes its agents' links with 1001 (going away). The agent takes
that as a restart, not as a failure of the link: its backoff starts again from the
first attempt, so a second restart soon after the first (a config fixed twice) does
not leave it away for the grown backoff of the first (up to a minute before).
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.harness import enroll_named, status_of
from tests.e2e.procs import URL_LINE, Proc, running_hub, spawn, wait_until

pytestmark = pytest.mark.e2e

RECONNECTING = re.compile(r"reconnecting to \S+ in [0-9.]+s \(attempt (\d+)\)")
SHUT_DOWN = re.compile(r"disconnected from \S+: the hub is shutting down \(close code 1001\)")


def next_attempt(agent: Proc, after: int) -> int:
    """The attempt number of the agent's first reconnect line past its first ``after`` lines."""
    found: list[int] = []

    def logged() -> bool:
        found.extend(int(m.group(1)) for line in agent.lines[after:] if (m := RECONNECTING.search(line)))
        return bool(found)

    wait_until(logged, timeout=15)
    return found[0]


def test_two_restarts_in_a_row_find_the_agent_at_its_first_attempt(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_named(hub, tmp_path / "home-twice", "twice")
        proc = agent.start()
        wait_until(lambda: status_of(hub, "twice") == "online")
        port = urlsplit(hub.url).port
        hubs = [hub.proc]
        try:
            for _ in range(2):
                mark = len(proc.lines)
                assert hubs[-1].stop(signal.SIGTERM, timeout=15) == 0
                # the link the hub ended is not the agent's failure: it starts again from attempt 1
                assert next_attempt(proc, mark) == 1, "\n".join(proc.lines[mark:])
                assert any(SHUT_DOWN.search(line) for line in proc.lines[mark:])
                again = spawn(
                    ["hub", "--bind", f"127.0.0.1:{port}", "--data-dir", str(hub.data_dir)], hub.env
                )
                hubs.append(again)
                assert again.wait_for(URL_LINE).group(1) == hub.url
                wait_until(lambda: status_of(hub, "twice") == "online", timeout=30)
            assert "Traceback" not in proc.output
        finally:
            agent.stop()
            for each in hubs:
                each.stop()

"""A removed agent that connects again is named in the hub's log line and audit row.

Regression: both said only where it came from (`refused agent connection from 127.0.0.1: this
agent was removed by an admin`, an `agent.connect` row with no target), so behind a NAT nobody
could tell which machine still ran the removed agent. The hub keeps no key of a removed agent
to check the register's signature with, so the id is recorded as claimed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.harness import audit_rows, status_of
from tests.e2e.procs import enroll_agent, running_hub, wait_until

pytestmark = pytest.mark.e2e


def test_a_removed_agent_connecting_again_is_named(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "a3")
        proc = agent.start()
        try:
            wait_until(lambda: status_of(hub, "a3") == "online")
            with hub.client() as http:
                agent_id = http.get("/api/v1/agents/a3").json()["id"]
            removed = hub.cli("hub", "agent", "remove", "a3")
            assert removed.returncode == 0, removed.stderr
            wait_until(lambda: proc.popen.poll() is not None, timeout=15)  # refused at its reconnect
        finally:
            agent.stop()
        seen = len(audit_rows(hub, "agent.connect"))
        restarted = agent.start()
        try:
            wait_until(lambda: restarted.popen.poll() is not None, timeout=15)
        finally:
            agent.stop()

        line = rf"refused agent connection from 127\.0\.0\.1 \(claims agent a3's revoked id {agent_id}\): "
        hub.proc.wait_for(re.compile(line + "this agent was removed by an admin$"))
        wait_until(lambda: len(audit_rows(hub, "agent.connect")) > seen)
        row = audit_rows(hub, "agent.connect")[seen]
        assert (row["actor"], row["target"], row["outcome"]) == ("agent", "a3", "denied")
        assert json.loads(row["detail"]) == {
            "peer": "127.0.0.1",
            "reason": "this agent was removed by an admin",
            "claimedId": agent_id,
        }

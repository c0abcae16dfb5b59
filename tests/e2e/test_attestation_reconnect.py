"""Attestation end to end, on reconnects: an accept made with the CLI holds, a held agent is
audited once per claim however often it reconnects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.harness import status_of, write_test_pack
from tests.e2e.procs import EnrolledAgent, RunningHub, enroll_agent, running_hub, wait_until, with_site
from tests.e2e.toolpack import write_toolpack

pytestmark = pytest.mark.e2e


def times_logged(hub: RunningHub, pattern: str) -> int:
    """How many lines of the hub's log match ``pattern`` so far."""
    return sum(1 for line in list(hub.proc.lines) if re.search(pattern, line))


def held_rows(hub: RunningHub, name: str) -> list[dict[str, object]]:
    """The ``attestation.held`` rows of ``name`` (read through the API: every entry flushed)."""
    with hub.client() as http:
        answer = http.get("/api/v1/audit", params={"action": "attestation.held", "agent": name})
    assert answer.status_code == 200, answer.text
    entries: list[dict[str, object]] = answer.json()["entries"]
    return entries


def held_agent(hub: RunningHub, tmp_path: Path, name: str) -> EnrolledAgent:
    """An agent ``name`` that connected once, then again with a new pack (unexplained): held.

    Left stopped, its disconnect logged.
    """
    agent = enroll_agent(hub, tmp_path, name)
    agent.start()
    wait_until(lambda: status_of(hub, name) == "online")
    agent.stop()
    wait_until(lambda: status_of(hub, name) == "offline")
    agent.env = with_site(agent.env, write_toolpack(tmp_path / "site"))
    agent.start()
    wait_until(lambda: status_of(hub, name) == "degraded")
    offline = times_logged(hub, rf"agent {name} offline")
    agent.stop()
    wait_until(lambda: times_logged(hub, rf"agent {name} offline") > offline)
    return agent


def test_an_accept_made_with_the_cli_holds_when_the_agent_reconnects_first(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = held_agent(hub, tmp_path, "echo")
        assert len(held_rows(hub, "echo")) == 1
        # the accept goes to the file; no API call looks at the agent before it reconnects
        done = hub.cli("hub", "agent", "accept", "echo")
        assert done.returncode == 0, done.stderr
        online = times_logged(hub, r"agent echo \(\w+\) online")
        agent.start()
        try:
            wait_until(lambda: times_logged(hub, r"agent echo \(\w+\) online") > online)
            assert status_of(hub, "echo") == "online"
            assert len(held_rows(hub, "echo")) == 1  # not held again against the old baseline
        finally:
            agent.stop()


def reconnect(hub: RunningHub, agent: EnrolledAgent) -> None:
    """Start ``agent`` and stop it again once the hub has brought it online (held or not)."""
    online = times_logged(hub, rf"agent {agent.name} \(\w+\) online")
    agent.start()
    try:
        wait_until(lambda: times_logged(hub, rf"agent {agent.name} \(\w+\) online") > online)
    finally:
        agent.stop()


HELD_WARNING = r"WARNING +sonde\.hub\.attestation: agent foxtrot is held as degraded"


def test_a_held_agent_reconnecting_with_the_same_claim_is_audited_and_logged_once(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = held_agent(hub, tmp_path, "foxtrot")
        assert len(held_rows(hub, "foxtrot")) == 1
        # the operator hears of it in the hub's log, with what changed and the command that accepts it
        # (before, only "agent foxtrot (...) online": the hold was on the audit log alone)
        [warning] = [line for line in hub.proc.lines if re.search(HELD_WARNING, line)]
        assert "packs: {" in warning, warning  # as agent_overview's pending_changes
        assert "'toolcheck'" in warning, warning  # the pack that appeared
        assert f"`sonde hub agent accept foxtrot --data-dir {hub.data_dir}`" in warning, warning
        for _ in range(3):
            reconnect(hub, agent)
        assert status_of(hub, "foxtrot") == "degraded"
        assert len(held_rows(hub, "foxtrot")) == 1
        assert times_logged(hub, HELD_WARNING) == 1
        # a different claim while held is held again, audited and logged
        agent.env = with_site(agent.env, write_test_pack(tmp_path / "site2"))
        reconnect(hub, agent)
        wait_until(lambda: len(held_rows(hub, "foxtrot")) == 2)
        assert status_of(hub, "foxtrot") == "degraded"
        assert times_logged(hub, HELD_WARNING) == 2
        with hub.client() as http:
            overview = http.get("/api/v1/agents/foxtrot").json()
        last = [line for line in hub.proc.lines if re.search(HELD_WARNING, line)][-1]
        assert "; ".join(overview["attestation"]["pending_changes"]) in last, (overview, last)


def test_a_held_agent_back_on_its_accepted_claim_stays_held_and_is_told_so(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = held_agent(hub, tmp_path, "golf")
        unchanged_env = {k: v for k, v in agent.env.items() if k != "PYTHONPATH"}  # the pack gone again
        agent.env = unchanged_env
        reconnect(hub, agent)
        wait_until(lambda: len(held_rows(hub, "golf")) == 2)
        assert status_of(hub, "golf") == "degraded"  # a mismatch was seen: an admin clears it
        said = "back to its accepted attestation after an unexplained change, still held"
        assert held_rows(hub, "golf")[0]["detail"] == {"changes": [said]}, held_rows(hub, "golf")
        last = [line for line in hub.proc.lines if "agent golf is held as degraded" in line][-1]
        assert f"({said})" in last, last  # before: "changed again while held", with nothing pending
        with hub.client() as http:
            overview = http.get("/api/v1/agents/golf").json()
        assert overview["attestation"]["pending_changes"] == [said]

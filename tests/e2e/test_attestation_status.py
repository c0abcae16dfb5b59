"""After an attestation accept the status stored in the database is true (`sonde hub agent list`
reads it): ``online`` for an agent connected to a running hub, whichever way it was accepted,
``offline`` when no hub runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import status_of
from tests.e2e.procs import EnrolledAgent, RunningHub, enroll_agent, running_hub, wait_until, with_site
from tests.e2e.toolpack import write_toolpack

pytestmark = pytest.mark.e2e


def stored_status(hub: RunningHub, name: str) -> str:
    """The status ``sonde hub agent list`` shows: the one in the database."""
    listed = hub.cli("hub", "agent", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return str(next(agent["status"] for agent in json.loads(listed.stdout) if agent["name"] == name))


def restart_held(hub: RunningHub, agent: EnrolledAgent, env: dict[str, str]) -> None:
    """Restart ``agent`` with ``env`` (a pack more or less, same version: unexplained): held."""
    agent.stop()
    wait_until(lambda: status_of(hub, agent.name) in ("offline", "degraded"))
    agent.env = env
    agent.start()
    wait_until(lambda: stored_status(hub, agent.name) == "degraded")


def test_the_stored_status_is_true_after_an_accept(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "golf")
        plain, with_pack = agent.env, with_site(agent.env, write_toolpack(tmp_path / "site"))
        agent.start()
        try:
            wait_until(lambda: stored_status(hub, "golf") == "online")
            restart_held(hub, agent, with_pack)

            done = hub.cli("hub", "agent", "accept", "golf")  # in the file, beside the running hub
            assert done.returncode == 0, done.stderr
            wait_until(lambda: stored_status(hub, "golf") == "online", timeout=10)
            assert status_of(hub, "golf") == "online"
            assert any(
                "its changed attestation was accepted (from the CLI)" in line for line in hub.proc.lines
            )

            restart_held(hub, agent, plain)  # the pack gone: held again
            done = hub.cli("hub", "agent", "accept", "golf")
            assert done.returncode == 0, done.stderr
            assert status_of(hub, "golf") == "online"  # a view that re-reads it from the file at once
            wait_until(lambda: stored_status(hub, "golf") == "online", timeout=10)

            restart_held(hub, agent, with_pack)
            with hub.client() as http:
                accepted = http.post("/api/v1/agents/golf/attestation/accept")
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["status"] == "online"
            assert stored_status(hub, "golf") == "online"  # written before the answer

            restart_held(hub, agent, plain)
        finally:
            agent.stop()
    done = hub.cli("hub", "agent", "accept", "golf")  # no hub runs: the agent is offline
    assert done.returncode == 0, done.stderr
    assert stored_status(hub, "golf") == "offline"

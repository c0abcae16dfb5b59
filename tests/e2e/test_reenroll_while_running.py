"""A machine enrolled again while its agent runs: the agent goes on with the new identity.

Regression: the hub ended the old identity, and the agent exited 3 (which the systemd unit does
not restart), advising the very `sonde enroll --replace` that had just been run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.harness import agent_rows
from tests.e2e.procs import SONDE, enroll_agent, running_hub, wait_until
from tests.subprocs import run_ok

pytestmark = pytest.mark.e2e

GOES_ON = re.compile(r"this machine was enrolled again, as web-1 \(agent id (\S+)\), while it ran")


def test_an_agent_enrolled_again_while_it_runs_goes_on_with_the_new_identity(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "web-1")
        proc = agent.start()
        try:
            wait_until(lambda: agent_rows(hub).get("web-1", {}).get("status") == "online")
            old_id = agent_rows(hub)["web-1"]["id"]
            done = run_ok(  # the token on stdin, as a person gives it
                [*SONDE, "enroll", "--hub", hub.url, "--name", "web-1", "--replace"],
                input=f"{hub.token('--name', 'web-1')}\n",
                env=agent.env,
                timeout=30,
            )
            said_enroll = (
                f"the agent running on this machine (PID {proc.popen.pid}) goes on with the new identity"
            )
            assert said_enroll in done.stderr
            new_id = json.loads((agent.home / ".sonde" / "config.json").read_text())["agentId"]
            assert new_id != old_id
            said = proc.wait_for(GOES_ON, timeout=30)
            assert said.group(1) == new_id
            wait_until(lambda: agent_rows(hub).get("web-1", {}).get("id") == new_id, timeout=30)
            wait_until(lambda: agent_rows(hub)["web-1"]["status"] == "online", timeout=30)
            assert proc.popen.poll() is None, proc.output  # the same process, still running
            assert "re-enroll with" not in proc.output
        finally:
            code = agent.stop()
        assert code == 0, proc.output

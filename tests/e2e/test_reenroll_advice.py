"""An agent removed by an admin says how to enroll again, and that command works as given.

Regression: it advised `sonde enroll --hub URL --token TOKEN`, which this machine refuses
(it is still enrolled: "Pass --replace"), and with --replace alone it enrolled under the
hostname instead of its old name.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.e2e.harness import status_of
from tests.e2e.procs import SONDE, enroll_agent, running_hub, wait_until

pytestmark = pytest.mark.e2e

ADVICE = re.compile(
    r"re-enroll with `sonde (enroll [^`]+)`, giving it a token from `sonde hub token create --name (\S+)`"
)


def test_the_advice_of_a_removed_agent_enrolls_it_again_under_its_name(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "web-7")
        proc = agent.start()
        try:
            wait_until(lambda: status_of(hub, "web-7") == "online")
            removed = hub.cli("hub", "agent", "remove", "web-7")
            assert removed.returncode == 0, removed.stderr
            wait_until(lambda: proc.popen.poll() is not None, timeout=15)
            assert proc.popen.returncode == 3, proc.output
            advice = proc.wait_for(ADVICE)
        finally:
            agent.stop()
        command, token_name = advice.group(1), advice.group(2)
        assert token_name == "web-7"
        token = hub.token("--name", token_name)
        done = subprocess.run(
            [*SONDE, *shlex.split(command)],
            input=f"{token}\n",  # as a person gives it: on stdin, never on the command line
            env=agent.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "enrolled as web-7 (agent id " in done.stderr
        again = agent.start()
        try:
            wait_until(lambda: status_of(hub, "web-7") == "online")
        finally:
            agent.stop()
        assert again.popen.returncode == 0

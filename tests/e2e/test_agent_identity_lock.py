"""One `sonde start` per identity: a second one (the service running, the same config run by
hand) exits at once naming the first, instead of the two replacing each other's connection."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sonde.agent.exit_codes import EXIT_ALREADY_RUNNING
from sonde.agent.identity_lock import AGENT_LOCK_FILE
from tests.e2e.procs import SONDE, enroll_agent, running_hub, spawn, wait_until
from tests.subprocs import run_ok


def test_a_second_sonde_start_with_one_identity_exits_naming_the_first(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        agent = enroll_agent(hub, tmp_path, "web-1")
        first = agent.start()
        wait_until(lambda: hub.statuses().get("web-1") == "online", timeout=30)
        second = spawn(["start", "--allow-root"], agent.env)
        try:
            code = second.popen.wait(20)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            second.stop()
        config = agent.home / ".sonde" / "config.json"
        assert code == EXIT_ALREADY_RUNNING, second.output + "\nthe first:\n" + first.output
        assert (
            f"sonde start: another sonde start (PID {first.popen.pid}) is running with this identity "
            f"({config}): stop it first"
        ) in second.output
        assert "Traceback" not in second.output
        assert (agent.home / ".sonde" / AGENT_LOCK_FILE).read_text().strip() == str(first.popen.pid)
        assert "replaced by a newer connection" not in first.output
        assert first.popen.poll() is None
        assert hub.statuses() == {"web-1": "online"}

        # `sonde enroll` takes no lock: beside a running agent it enrolls again, as it did before
        enroll = [*SONDE, "enroll", "--hub", hub.url, "--token", hub.token(), "--name", "web-2", "--replace"]
        run_ok(enroll, env=agent.env, timeout=30)

        assert agent.stop() == 0
        again = agent.start()  # the lock went with the first: the new identity starts
        wait_until(lambda: hub.statuses().get("web-2") == "online", timeout=30)
        assert agent.stop() == 0, again.output

"""`sonde start` given a second SIGTERM or SIGINT while it stops (`kill` again, an impatient
supervisor, Ctrl-C twice): it says it is already stopping and exits 0 as the first would have it;
one that comes as the agent exits changes nothing either.

Before, the first signal's handler ended the agent's receiving of signals as soon as the stop
was under way, and trio hands a signal that comes after that to its default action. The stop
itself is not always quick: the agent waits for its probes to end, and a probe may take a while
to clean up. A second SIGTERM then killed the stopping agent (exit 143). A test pack's probe takes
3 s to, so the second signal lands there (its command is killed at once: the probe's own clean-up
is what keeps the stop going; before it did, a loaded CI saw the stop end before the second signal,
which then killed the agent in the instant before its exit: 143 again).
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from pathlib import Path

import httpx
import psutil
import pytest

from sonde.agent.main import ALREADY_STOPPING
from tests.e2e.procs import enroll_agent, running_hub, wait_until
from tests.testpacks import install_test_pack

pytestmark = pytest.mark.e2e

STUBBORN_PACK_SOURCE = '''
"""Test-only pack: a probe slow to stop."""
import trio

from sonde.packs.base import Pack, Params, Result
from sonde.packs.process import run_command

PACK = Pack("stubborn", "0.0.1", "A probe whose command is slow to stop.")


class Ran(Result):
    returncode: int


@PACK.probe("stubborn.command.run", "Runs a command, then takes 3 s to clean up.", timeout_s=60)
async def run(ctx, params: Params) -> Ran:
    try:
        done = await run_command(["sh", "-c", "trap '' TERM; exec sleep 20"])
    finally:
        with trio.CancelScope(shield=True):  # its clean-up outlasts a cancel: the stop waits for it
            await trio.sleep(3)
    return Ran(returncode=done.returncode)
'''


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_while_stopping_is_said_and_the_agent_exits_0(
    tmp_path: Path, signum: signal.Signals
) -> None:
    site = install_test_pack(tmp_path / "site", "stubborn", STUBBORN_PACK_SOURCE)
    with running_hub(tmp_path, "--heartbeat-interval", "1", site=site) as hub:
        agent = enroll_agent(hub, tmp_path, "twice", site)
        proc = agent.start()
        wait_until(lambda: hub.statuses() == {"twice": "online"}, timeout=30)

        def call_probe() -> None:  # answered when the agent stops; what it says is not this test's
            with hub.client() as http, contextlib.suppress(httpx.HTTPError):
                http.post(
                    "/api/v1/probe", json={"agent": "twice", "probe": "stubborn.command.run"}, timeout=30
                )

        caller = threading.Thread(target=call_probe, daemon=True)
        caller.start()
        wait_until(lambda: command_running(proc.popen.pid), timeout=15)
        proc.popen.send_signal(signum)
        proc.wait_for(re.compile(rf"{signum.name} received: stopping"))
        proc.popen.send_signal(signum)  # while the agent waits out its probe's command
        proc.wait_for(re.compile(re.escape(ALREADY_STOPPING)))
        code = proc.popen.wait(20)
        caller.join(30)
    output = proc.output
    assert code == 0, output
    assert "Traceback" not in output, output
    assert "KeyboardInterrupt" not in output, output
    assert len(re.findall(r"received: stopping", output)) == 1, output


def command_running(agent_pid: int) -> bool:
    """Whether the agent runs the probe's command (its `sleep`) yet."""
    return any(child.name() == "sleep" for child in psutil.Process(agent_pid).children(recursive=True))

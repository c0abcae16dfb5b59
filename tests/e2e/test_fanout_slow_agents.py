"""End to end: agents that hang do not keep a `health_check` from asking the others.

A real hub and two real agents with a test-only pack: 30 categories of the same 10 steps, 300
steps an agent. On ``a-slow`` every step hangs (a stuck mount, say); ``b-quick`` answers at once.

Before: a call's 256 workers took the steps in order, so a-slow's first 256 held every worker
until the deadline, and b-quick was never asked: its 300 steps were reported timed out, healthy
as it was (in a fleet, 86 hanging agents of 3 steps did the same to every agent after them).
Now a step slow for 2 s is left to its worker alone and another worker takes the worker's place.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.procs import enroll_agent, running_hub, wait_until
from tests.testpacks import install_test_pack

PROBES = 10
CATEGORIES = 30
PACK = f'''
"""Test-only: {PROBES} probes that hang while the agent's hang file exists, in {CATEGORIES} runbooks."""
import os
from pathlib import Path

import trio

from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.runbook import Runbook, RunbookStep

PACK = Pack("stuck", "0.0.1", "Test-only: probes that hang on one agent.")
HANG = Path(os.environ.get("STUCK_STATE", ".")) / "hang"  # the agent's; the hub only reads the runbooks


class Value(Result):
    value: int


async def maybe_hang(ctx, params: NoParams) -> Value:
    while HANG.exists():
        await trio.sleep(0.05)
    return Value(value=1)


STEPS = [f"stuck.mount.m{{n}}" for n in range({PROBES})]
for name in STEPS:
    PACK.probe(name, "Hangs while the hang file exists.")(maybe_hang)


def nothing(reading):
    return []


for n in range({CATEGORIES}):
    PACK.runbooks[f"stuck{{n:02d}}"] = Runbook(
        f"stuck{{n:02d}}", "Steps that may hang.", tuple(RunbookStep(s, nothing) for s in STEPS)
    )
'''


def test_a_health_check_asks_healthy_agents_while_others_hang(tmp_path: Path) -> None:
    site = install_test_pack(tmp_path / "site", "stuck", PACK)
    states = {name: tmp_path / f"state-{name}" for name in ("a-slow", "b-quick")}
    for state in states.values():
        state.mkdir()
    hang = states["a-slow"] / "hang"
    hang.touch()
    with running_hub(tmp_path, site=site) as hub:
        agents = [
            enroll_agent(hub, tmp_path, name, site, extra_env={"STUCK_STATE": str(state)})
            for name, state in states.items()
        ]
        for agent in agents:
            agent.start()
        try:
            wait_until(lambda: hub.statuses() == dict.fromkeys(states, "online"), timeout=30)
            with hub.client() as http:
                http.timeout = 60
                categories = [f"stuck{n:02d}" for n in range(CATEGORIES)]
                answer = http.post("/api/v1/health-check", json={"categories": categories, "deadline_s": 10})
            assert answer.status_code == 200, answer.text
            output = answer.json()
            summary = output["summary"]
            assert summary["agents_checked"] == 2
            assert summary["probes_run"] == 2 * PROBES * CATEGORIES
            # every one of b-quick's steps answered (before: none, all "timeout")
            assert summary["probes_succeeded"] == PROBES * CATEGORIES, summary
            assert summary["probes_failed"] == PROBES * CATEGORIES
            assert output["partial"] is True
            assert {failed["agent"] for failed in output["failed"]} == {"a-slow"}
            assert {failed["status"] for failed in output["failed"]} == {"timeout"}
        finally:
            hang.unlink()
            for agent in agents:
                agent.stop()

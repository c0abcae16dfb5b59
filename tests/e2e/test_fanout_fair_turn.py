"""Fan-outs take turns on an agent: a single probe call is not queued behind them, nor refused.

A real hub and a real agent with a test-only pack whose runbook has 16 steps that wait until the
test lets them go. Five health_checks at once ask that agent for 80 probes.

Before: every fan-out probe went straight onto the agent's link (first in, first out). The
agent had 64 probes in flight, the rest of the fan-outs' were refused ("agent has 64 probes in
flight already"), and so was a single probe call, admin key or not; under load a call that got in
waited seconds behind the fan-outs' (9 s measured, with 50 health_checks over 200 agents). Now a
fan-out's probe waits for one of the agent's 8 fan-out slots before it enters the link.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sonde.hub.fan_out_places import FAN_OUT_PER_AGENT
from tests.e2e.procs import EnrolledAgent, RunningHub, enroll_agent, running_hub, wait_until
from tests.testpacks import install_test_pack

STEPS = 16
CHECKS = 5
OTHER_STEPS = 4
PACK = f'''
"""Test-only: {STEPS} probes that wait for a file, one that answers at once."""
import os
import uuid
from pathlib import Path

import trio

from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.runbook import Runbook, RunbookStep

PACK = Pack("turns", "0.0.1", "Test-only: probes that wait until the test lets them go.")
STATE = Path(os.environ.get("TURNS_STATE", "."))  # the agent's; the hub only reads the runbook


class Value(Result):
    value: int


def waiting(name):
    async def wait_for_release(ctx, params: NoParams) -> Value:
        with open(STATE / "order", "a") as order:  # the order probes started in
            order.write(name + "\\n")
        running = STATE / f"running-{{uuid.uuid4().hex}}"
        running.touch()
        try:
            while not (STATE / "release").exists():
                await trio.sleep(0.05)
        finally:  # answered, or cancelled (its deadline)
            running.rename(running.with_name(running.name.replace("running-", "ended-")))
        return Value(value=1)

    return wait_for_release


WAITING = [f"turns.wait.w{{n:02d}}" for n in range({STEPS})]
OTHER = [f"turns.other.o{{n}}" for n in range({OTHER_STEPS})]
for name in WAITING + OTHER:
    PACK.probe(name, "Waits for the test's release.")(waiting(name))


@PACK.probe("turns.quick", "Answers at once.")
async def quick(ctx, params: NoParams) -> Value:
    return Value(value=2)


def nothing(reading):
    return []


PACK.runbooks["turns"] = Runbook("turns", "Steps that wait.", tuple(RunbookStep(n, nothing) for n in WAITING))
PACK.runbooks["other"] = Runbook("other", "Other steps that wait.", tuple(RunbookStep(n, nothing) for n in OTHER))
'''


def running(state: Path) -> int:
    """The waiting probes running on the agent now."""
    return len(list(state.glob("running-*")))


def started(state: Path) -> int:
    """The waiting probes the agent has started, running or ended."""
    return running(state) + len(list(state.glob("ended-*")))


@contextmanager
def busy_agent(
    tmp_path: Path, *hub_args: str, state: str = "state"
) -> Iterator[tuple[RunningHub, EnrolledAgent, Path]]:
    """A hub with the test pack and agent busy-1, online, its probes' marks in ``tmp_path/state``;
    every waiting probe is let go, and the agent stopped, at the end."""
    site = install_test_pack(tmp_path / "site", "turns", PACK)
    marks = tmp_path / state
    marks.mkdir()
    with running_hub(tmp_path, *hub_args, site=site) as hub:
        agent = enroll_agent(hub, tmp_path, "busy-1", site, extra_env={"TURNS_STATE": str(marks)})
        agent.start()
        try:
            wait_until(lambda: hub.statuses() == {"busy-1": "online"}, timeout=30)
            yield hub, agent, marks
        finally:
            (marks / "release").touch()
            agent.stop()


def test_a_probe_call_gets_a_turn_while_fan_outs_fill_an_agent(tmp_path: Path) -> None:
    with busy_agent(tmp_path) as (hub, _, state):
        answers: list[dict[str, Any]] = []
        checks = start_health_checks(hub, answers)
        wait_until(lambda: running(state) >= FAN_OUT_PER_AGENT)
        time.sleep(1.0)  # the fan-outs have sent all they could (before: 64 at once)
        assert running(state) == FAN_OUT_PER_AGENT

        with hub.client() as http:  # admin key: before, refused too (64 in flight)
            single = http.post("/api/v1/probe", json={"agent": "busy-1", "probe": "turns.quick"})
        assert single.status_code == 200, single.text
        assert single.json()["result"] == {"value": 2}

        (state / "release").touch()
        for check in checks:
            check.join(timeout=60)
        assert len(answers) == CHECKS
        for answer in answers:  # each fan-out waited its turn: none of its probes was refused
            assert answer["failed"] == [], answer["failed"][:3]
            assert answer["summary"]["probes_run"] == STEPS
        assert started(state) == STEPS * CHECKS


def start_health_checks(
    hub: RunningHub,
    answers: list[dict[str, Any]],
    key: str | None = None,
    category: str = "turns",
    count: int = CHECKS,
) -> list[threading.Thread]:
    """``count`` health_checks of busy-1's waiting steps, each in a thread; their answers go to ``answers``."""

    def health_check() -> None:
        with hub.client(key) as http:
            http.timeout = 60
            body = {"agent": "busy-1", "categories": [category], "deadline_s": 60}
            answer = http.post("/api/v1/health-check", json=body)
            assert answer.status_code == 200, answer.text
            answers.append(answer.json())

    checks = [threading.Thread(target=health_check) for _ in range(count)]
    for check in checks:
        check.start()
    return checks


def test_fan_outs_waiting_when_the_agent_reconnects_take_turns_on_its_new_connection(tmp_path: Path) -> None:
    """Regression: a fan-out probe took its slot on the connection it found, then ran on the one
    that replaced it meanwhile, beside that one's own 8: each reconnect let 8 more onto the link."""
    after = tmp_path / "after"
    after.mkdir()
    with busy_agent(tmp_path, "--probe-timeout", "2", state="before") as (hub, agent, before):
        first = agent.proc
        assert first is not None
        again = agent.clone(tmp_path / "home-again")
        again.env = {**again.env, "TURNS_STATE": str(after)}
        try:
            answers: list[dict[str, Any]] = []
            checks = start_health_checks(hub, answers)
            wait_until(lambda: running(before) == FAN_OUT_PER_AGENT)
            first.popen.send_signal(signal.SIGSTOP)  # its 8 time out (2 s); its socket stays open
            # the same agent again (a copy of its config: the first holds its HOME's identity lock):
            # the hub takes its new connection
            again.start()
            wait_until(lambda: running(after) >= 1, timeout=30)
            checks += start_health_checks(hub, answers)  # these find the new connection
            wait_until(lambda: started(after) >= 2 * FAN_OUT_PER_AGENT, timeout=30)  # some timed out (2 s)
            for _ in range(30):  # 3 s of the waiters moving on: never more than 8 at once on the agent
                assert running(after) <= FAN_OUT_PER_AGENT
                time.sleep(0.1)
            (after / "release").touch()
            for check in checks:
                check.join(timeout=60)
            assert len(answers) == 2 * CHECKS
        finally:
            (after / "release").touch()
            first.popen.send_signal(signal.SIGCONT)
            first.stop()
            if again.proc is not None:
                again.stop()


def test_another_keys_fan_out_takes_turns_with_a_flood_of_them(tmp_path: Path) -> None:
    """Regression: fan-outs waited for an agent's places in arrival order, so one key's five
    health_checks (80 steps queued) kept another key's (4 steps) waiting until all of theirs had run."""
    with busy_agent(tmp_path, "--log-level", "DEBUG") as (hub, _, state):
        made = hub.cli("hub", "key", "create", "--name", "team-b")
        assert made.returncode == 0, made.stderr
        key_id = re.search(r"API key ([0-9a-f]{32})", made.stderr)
        assert key_id is not None, made.stderr
        answers: list[dict[str, Any]] = []
        checks = start_health_checks(hub, answers)  # the admin key's flood
        wait_until(lambda: running(state) == FAN_OUT_PER_AGENT)
        checks += start_health_checks(hub, answers, made.stdout.strip(), "other", 1)
        # team-b's steps wait their turn: all 4 queued in the hub before any place is handed on
        # (a fixed 1 s was not always enough on a loaded machine: then the flood's 80 went first)
        queued = f"a fan-out probe of key {key_id.group(1)} waits its turn"
        wait_until(lambda: sum(queued in line for line in hub.proc.lines) == OTHER_STEPS, timeout=30)
        (state / "release").touch()
        for check in checks:
            check.join(timeout=60)
        assert len(answers) == CHECKS + 1
        order = (state / "order").read_text().split()
        assert len(order) == STEPS * CHECKS + OTHER_STEPS
        other = [n for n, name in enumerate(order) if name.startswith("turns.other.")]
        assert len(other) == OTHER_STEPS
        # every other place handed on is team-b's: its 4 start among the first 8 after the 8
        # that held the places, give or take the order an agent starts one read's probes in
        # (in arrival order, after the flood's 80)
        assert max(other) < 2 * FAN_OUT_PER_AGENT + 2 * OTHER_STEPS, other

"""The keepalive of a tool call that waits on agents: when it speaks, what it says, how it
combines with a tool's own progress, and that it ends with the call (virtual time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.errors import HubError
from sonde.hub.mcp_keepalive import KEEPALIVE_INTERVAL_S, CallProgress, call_kept_alive, keepalive_report
from sonde.hub.tools import all_tools
from sonde.hub.tools.base import AgentWait, ProgressFn

Sent = tuple[float, float, float | None, str | None]  # (virtual time, progress, total, message)
TRACEROUTE = AgentWait("alpha: system.network.traceroute", 120.0)


def recorder() -> tuple[list[Sent], ProgressFn]:
    sent: list[Sent] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        sent.append((trio.current_time(), progress, total, message))

    return sent, report


def test_a_keepalive_counts_seconds_toward_the_deadline() -> None:
    assert keepalive_report(TRACEROUTE, 30.2, None) == (
        30,
        120.0,
        "waiting for alpha: system.network.traceroute, 30 s of 120 s",
    )
    assert keepalive_report(AgentWait("beta: x.y.z", None), 15, None) == (
        15,
        None,
        "waiting for beta: x.y.z, 15 s so far",
    )


def test_on_a_tool_that_counts_a_keepalive_stays_between_its_counts() -> None:
    fleet = AgentWait("the fleet: health_check", 60.0)
    assert keepalive_report(fleet, 15, (3, 10)) == (
        3.25,
        10,
        "waiting for the fleet: health_check (3 of 10 done), 15 s of 60 s",
    )
    # before its first count: 0 on its scale, not 15 seconds (its counts would all be below it)
    assert keepalive_report(fleet, 15, (0, None)) == (
        0.25,
        None,
        "waiting for the fleet: health_check, 15 s of 60 s",
    )
    progress, _, _ = keepalive_report(fleet, 600, (3, 10))  # past the deadline: still below the next count
    assert 3 < progress < 4


async def test_the_keepalive_speaks_every_interval_and_ends_with_the_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent, report = recorder()

    async def slow_probe(progress: ProgressFn) -> str:
        await trio.sleep(50)
        return "answer"

    assert await call_kept_alive(slow_probe, report, TRACEROUTE) == "answer"
    await trio.sleep(100)  # nothing once the call is done
    assert [(at, progress, total) for at, progress, total, _ in sent] == [
        (KEEPALIVE_INTERVAL_S, 15, 120.0),
        (2 * KEEPALIVE_INTERVAL_S, 30, 120.0),
        (3 * KEEPALIVE_INTERVAL_S, 45, 120.0),
    ]
    assert sent[0][3] == "waiting for alpha: system.network.traceroute, 15 s of 120 s"


async def test_a_call_done_within_the_interval_sends_nothing(autojump_clock: trio.testing.MockClock) -> None:
    sent, report = recorder()

    async def quick(progress: ProgressFn) -> int:
        await trio.sleep(KEEPALIVE_INTERVAL_S - 1)
        return 1

    assert await call_kept_alive(quick, report, TRACEROUTE) == 1
    assert sent == []


async def test_a_tools_own_counts_and_the_keepalive_only_ever_increase(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """health_check's agents-checked counts, with keepalives between them; a stale count is dropped."""
    sent, report = recorder()
    fleet = AgentWait("the fleet: health_check", 60.0)

    async def health_check(progress: ProgressFn) -> None:
        for at, done in ((20, 1), (21, 1), (25, 2), (50, 3)):  # the second 1: a late, stale report
            await trio.sleep_until(at)
            await progress(done, 4, f"agent {done} checked")

    await call_kept_alive(health_check, report, fleet, tool_counts=True)
    assert [(at, progress) for at, progress, _, _ in sent] == [
        (15, 0.25),  # no agent checked yet: on the tool's scale all the same
        (20, 1),
        (25, 2),
        (30, 2.5),
        (45, 2.75),
        (50, 3),
    ]
    values = [progress for _, progress, _, _ in sent]
    assert values == sorted(set(values))
    assert sent[3][2:] == (4, "waiting for the fleet: health_check (2 of 4 done), 30 s of 60 s")


async def test_a_keepalive_and_a_count_sent_together_go_out_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A slow stream: the keepalive's send is still going when the tool's count comes."""
    arrived: list[float] = []

    async def slow_report(progress: float, total: float | None, message: str | None) -> None:
        await trio.sleep(1 if progress < 1 else 0)  # the first send is slow, the others are not
        arrived.append(progress)

    progress = CallProgress(slow_report, tool_counts=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.keepalive, AgentWait("the fleet: health_check", 60.0), 15.0)
        await trio.sleep(0.5)
        nursery.start_soon(progress, 1, 4, "agent 1 checked")
        await trio.sleep(0.1)
        nursery.start_soon(progress.keepalive, AgentWait("the fleet: health_check", 60.0), 16.0)
    assert arrived == [0.25, 1, 1 + 16 / 60]  # each waited for the send before it, and read what it sent


async def test_the_calls_own_errors_come_out_unwrapped(autojump_clock: trio.testing.MockClock) -> None:
    _, report = recorder()

    async def refused(progress: ProgressFn) -> None:
        await trio.sleep(20)
        raise HubError("Agent alpha is offline.")

    with pytest.raises(HubError, match="offline"):
        await call_kept_alive(refused, report, TRACEROUTE)


async def test_a_cancelled_call_ends_its_keepalive(autojump_clock: trio.testing.MockClock) -> None:
    sent, report = recorder()

    async def endless(progress: ProgressFn) -> None:
        await trio.sleep_forever()

    with trio.move_on_after(20):
        await call_kept_alive(endless, report, TRACEROUTE)
    await trio.sleep(100)
    assert [at for at, _, _, _ in sent] == [KEEPALIVE_INTERVAL_S]


@pytest.mark.parametrize(
    ("tool", "arguments", "deadline_s"),
    [
        ("probe", {"agent": "alpha", "probe": "system.logs.tail", "params": {}}, 15.0),  # its own, shorter
        ("probe", {"agent": "alpha", "probe": "system.network.traceroute"}, 45.0),  # 60: the hub's is shorter
        ("probe", {"agent": "alpha", "probe": "acme.widget.count"}, 45.0),  # not the hub's: the hub's
        ("query_logs", {"agent": "alpha", "source": "systemd"}, 20.0),  # systemd.journal.query
        ("query_logs", {"agent": "alpha", "source": "docker"}, 45.0),  # no container: refused at once
    ],
)
async def test_a_keepalive_counts_toward_the_deadline_the_probe_has(
    tmp_path: Path, tool: str, arguments: dict[str, Any], deadline_s: float
) -> None:
    """It said "15 s of 30 s" of a probe that the agent stops at 15 s: the hub's timeout, not the probe's."""
    async with open_hub(HubConfig(data_dir=tmp_path, probe_timeout_s=45.0)) as hub:
        [spec] = [spec for spec in all_tools() if spec.name == tool]
        wait = spec.agent_wait(hub, arguments)
    assert wait is not None
    assert wait.deadline_s == deadline_s

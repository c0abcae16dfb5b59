"""`system.processes.top` stops its walk when it gives up, and concurrent calls share one scan.

On a machine with some 12,000 processes, 32 calls at once each walked all of /proc (twice)
in threads that ran on after the calls had timed out: all timed out, and the agent grew
from 41 to 205 MB. Here the walk is held at its first process while its probe is cancelled,
then let go: it must stop within `STOP_CHECK_EVERY` processes, not walk the rest. And calls
that run together are answered from one scan of /proc.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import psutil
import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeOutcome, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK, processes
from sonde.packs.system.abandon import STOP_CHECK_EVERY
from tests.packs.given_up import cancel_once_entered, wait_threads_returned
from tests.packs.test_walks_stop import HeldAtFirst

REGISTRY = PackRegistry.of([PACK])
MORE_PROCESSES = 2 * STOP_CHECK_EVERY  # a walk that never looks at its flag reads them all
CALLS_AT_ONCE = 6


@pytest.fixture
def many_processes() -> Iterator[None]:
    """`MORE_PROCESSES` sleeping processes beside the machine's own."""
    started = [subprocess.Popen(["sleep", "60"]) for _ in range(MORE_PROCESSES)]
    yield
    for child in started:
        child.kill()
    for child in started:
        child.wait()


@pytest.mark.usefixtures("many_processes")
async def test_a_top_past_its_deadline_stops_its_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldAtFirst(processes._unless_denied)
    monkeypatch.setattr(processes, "_unless_denied", held)
    ctx = ProbeContext()
    await cancel_once_entered(partial(execute_probe, REGISTRY, "system.processes.top", {}, ctx), held.entered)
    calls = held.calls
    held.release.set()
    await wait_threads_returned(ctx)
    more = held.calls - calls
    assert more <= STOP_CHECK_EVERY, more  # without the flag: every other process


class Counted:
    """Wraps ``function``, counting its calls."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function, self.calls = function, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.function(*args)


async def test_calls_at_once_share_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    pids = Counted(psutil.pids)
    monkeypatch.setattr(psutil, "pids", pids)
    ctx = ProbeContext()
    outcomes: list[ProbeOutcome] = []

    async def top(sort_by: str) -> None:
        outcomes.append(await execute_probe(REGISTRY, "system.processes.top", {"sort_by": sort_by}, ctx))

    async with trio.open_nursery() as nursery:
        for number in range(CALLS_AT_ONCE):
            nursery.start_soon(top, ("cpu", "memory")[number % 2])
    assert pids.calls == 1
    assert len(outcomes) == CALLS_AT_ONCE
    for outcome in outcomes:
        result = outcome.result
        assert result["process_count"] >= 1
        ranked = [
            entry["memory_percent" if result["sort_by"] == "memory" else "cpu_percent"]
            for entry in result["processes"]
        ]
        assert ranked == sorted(ranked, key=lambda value: -1 if value is None else value, reverse=True)
    # a call after them all scans again: nothing is kept
    await execute_probe(REGISTRY, "system.processes.top", {}, ctx)
    assert pids.calls == 2

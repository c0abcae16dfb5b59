"""The hub gives freed C-heap memory back after connection churn (`sonde.hub.heap_trim`).

After a storm of 1,000 agents connecting, the hub's RSS stayed 24 MiB above what it
held until ``malloc_trim(0)``. Here: the policy's timing, the governor with a
counting trim on a churn counter, and glibc's own ``malloc_trim`` giving back the
pages of a heap fragmented the way a storm leaves it.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from sonde.hub import heap_trim
from sonde.hub.heap_trim import (
    AT_LEAST_EVERY_S,
    CHECK_EVERY_S,
    TRIM_AFTER,
    TrimPolicy,
    churned,
    govern_heap,
)


@dataclass
class Counter:
    open: int = 0
    closed: int = 0

    def open_now(self) -> int:
        return self.open

    def closed_total(self) -> int:
        return self.closed


def test_a_trim_waits_for_enough_churn_and_for_the_storm_to_end() -> None:
    policy = TrimPolicy(last_at=0.0)
    assert not policy.due(5.0, TRIM_AFTER - 1)  # not enough yet
    assert not policy.due(10.0, TRIM_AFTER + 50)  # enough, but connections still coming
    assert policy.due(15.0, TRIM_AFTER + 50)  # quiet since the last check
    policy.trimmed(15.0, TRIM_AFTER + 50)
    assert not policy.due(20.0, TRIM_AFTER + 50)  # nothing new since


def test_a_storm_that_does_not_end_is_trimmed_now_and_then() -> None:
    policy = TrimPolicy(last_at=0.0)
    churn, now = 0, 0.0
    due_at = []
    while now < 2 * AT_LEAST_EVERY_S:
        now += CHECK_EVERY_S
        churn += TRIM_AFTER  # never quiet
        if policy.due(now, churn):
            policy.trimmed(now, churn)
            due_at.append(now)
    assert due_at == [AT_LEAST_EVERY_S, 2 * AT_LEAST_EVERY_S]


def test_opening_and_closing_both_count() -> None:
    assert churned(Counter(open=10, closed=0)) == 10
    assert churned(Counter(open=0, closed=10)) == 20  # ten opened, ten closed


def test_the_governor_trims_once_after_a_storm() -> None:
    connections = Counter()
    trims: list[int] = []

    def trim(pad: int) -> int:
        trims.append(pad)
        return 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(govern_heap, connections, CHECK_EVERY_S, trim)
            for _ in range(10):  # a storm: 50 connections a second for 10 s
                await trio.sleep(1.0)
                connections.open += 50
            await trio.sleep(3 * CHECK_EVERY_S)  # then quiet
            assert trims == [0]
            connections.open -= TRIM_AFTER  # a hundred close: churn enough for another
            connections.closed += TRIM_AFTER
            await trio.sleep(3 * CHECK_EVERY_S)
            assert trims == [0, 0]
            nursery.cancel_scope.cancel()

    # the clock jumps only after a real pause, so the trim's worker thread runs meanwhile
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.2))


def test_without_malloc_trim_the_governor_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_trim, "libc_malloc_trim", lambda: None)

    async def main() -> None:
        with trio.fail_after(1.0):
            await govern_heap(Counter())  # returns at once

    trio.run(main)


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's; the hub does without it elsewhere",
)
def test_glibc_gives_back_the_pages_freed_between_live_blocks() -> None:
    """In a fresh process, whose heap has no holes yet: in a test worker that has run many
    tests, the small live blocks fill old holes, the large ones end up together at the top,
    and free() alone gives them back."""
    done = subprocess.run(
        [sys.executable, "-c", FRAGMENT_AND_TRIM], capture_output=True, text=True, timeout=60, check=True
    )
    before, held, after = (int(n) for n in done.stdout.split())
    assert before - held < 40 * 2**20  # free() alone keeps most of the 120 MB: they are not at the top
    assert held - after > 60 * 2**20


FRAGMENT_AND_TRIM = """
import gc, psutil
from sonde.hub.heap_trim import libc_malloc_trim
trim = libc_malloc_trim()
process = psutil.Process()
kept, freed = [], []
for _ in range(2_000):  # as a storm leaves the heap: large transient blocks between small live ones
    freed.append(bytearray(60_000))
    kept.append(bytearray(2_000))
before = process.memory_info().rss
del freed
gc.collect()
held = process.memory_info().rss
trim(0)
print(before, held, process.memory_info().rss)
"""

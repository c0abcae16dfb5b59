"""The hub's GC policy: no full collection without churn, one after enough connections closed, bounded in rate."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio
import trio.testing

from sonde.hub import gc_policy
from sonde.hub.gc_policy import MAX_INTERVAL_S, MIN_INTERVAL_S, FullCollectionPolicy, govern_gc
from sonde.hub.tcp_guard import ConnectionCount


def test_a_steady_fleet_never_pays_for_a_full_collection() -> None:
    policy = FullCollectionPolicy(last_at=0.0)
    assert not policy.due(now=10 * MAX_INTERVAL_S, open_now=10_000, closed_total=0)


@pytest.mark.parametrize(
    ("connected", "left", "due"),
    [
        (10_000, 999, False),  # under 10 %
        (10_000, 1_000, True),
        (50, 99, False),  # a small fleet: at least 100
        (50, 100, True),
    ],
)
def test_a_full_collection_follows_churn(connected: int, left: int, due: bool) -> None:
    policy = FullCollectionPolicy(last_at=0.0)
    assert policy.due(now=MIN_INTERVAL_S, open_now=connected, closed_total=left) is due


def test_full_collections_are_at_most_every_few_minutes_and_at_least_every_few_hours() -> None:
    policy = FullCollectionPolicy(last_at=0.0)
    assert not policy.due(now=MIN_INTERVAL_S - 1, open_now=10, closed_total=10_000)
    policy.collected(now=MIN_INTERVAL_S, closed_total=10_000)
    assert not policy.due(now=2 * MIN_INTERVAL_S, open_now=10_000, closed_total=10_001)
    assert policy.due(now=MIN_INTERVAL_S + MAX_INTERVAL_S, open_now=10_000, closed_total=10_001)


def churn(count: ConnectionCount, opened: int, closed: int) -> None:
    for _ in range(opened):
        count.opened()
    for _ in range(closed):
        count.closed()


async def test_the_governor_collects_once_churn_makes_it_due(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    collections: list[float] = []
    monkeypatch.setattr(gc_policy.gc, "collect", lambda: collections.append(trio.current_time()) or 0)
    count = ConnectionCount()
    churn(count, opened=1000, closed=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(govern_gc, count, 30.0)
        await trio.sleep(2 * MAX_INTERVAL_S)
        assert collections == []  # nothing closed: never
        churn(count, opened=150, closed=150)
        await trio.sleep(31)
        assert len(collections) == 1
        churn(count, opened=50, closed=50)
        await trio.sleep(MIN_INTERVAL_S + 31)
        assert len(collections) == 1  # 50 more since: not enough
        nursery.cancel_scope.cancel()


def test_a_hub_process_turns_automatic_full_collections_off() -> None:
    code = (
        "import gc\n"
        "from sonde.hub.gc_policy import configure_gc\n"
        "configure_gc()\n"
        "print(gc.get_threshold(), gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    threshold, frozen = done.stdout.strip().rsplit(" ", 1)
    assert threshold == str(
        (gc_policy.GEN0_THRESHOLD, gc_policy.GEN1_THRESHOLD, gc_policy.GEN2_THRESHOLD_NEVER)
    )
    assert frozen == "True"

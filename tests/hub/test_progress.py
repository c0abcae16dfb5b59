"""Fleet-wide progress: the first and last report always go out, the rest at most once per interval."""

from __future__ import annotations

import trio

from sonde.hub.tools.base import ThrottledProgress


async def test_reports_are_throttled_but_the_first_and_last_always_go_out() -> None:
    sent: list[tuple[float, float | None, str | None]] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    throttled = ThrottledProgress(report, interval_s=0.05)
    for done in range(1, 1001):
        await throttled(done, 1000, f"agent-{done} checked")
    assert sent[0] == (1, 1000, "agent-1 checked")
    assert sent[-1] == (1000, 1000, "agent-1000 checked")
    assert len(sent) == 2  # a tight loop: everything between falls inside one interval

    throttled = ThrottledProgress(report, interval_s=0.05)
    await throttled(1, 4, "first")
    await throttled(2, 4, "too soon")
    await trio.sleep(0.06)
    await throttled(3, 4, "later")
    assert sent[-2:] == [(1, 4, "first"), (3, 4, "later")]  # once the interval has passed, the next goes out


async def test_reports_reach_the_client_in_order_when_agents_finish_together() -> None:
    """Four agents done at once, each reporting from its own task: the first report's send is slow."""
    arrived: list[float] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        await trio.sleep(0.05 if progress == 1 else 0)  # the stream still busy with the first
        arrived.append(progress)

    throttled = ThrottledProgress(report, interval_s=10)
    async with trio.open_nursery() as nursery:
        for done in (1, 2, 3, 4):
            nursery.start_soon(throttled, done, 4, f"agent-{done} checked")
            await trio.sleep(0.001)
    assert arrived == [1, 4]  # never 4 then 1: progress only goes up


async def test_a_count_below_one_sent_is_not_sent() -> None:
    sent: list[float] = []

    async def report(progress: float, total: float | None, message: str | None) -> None:
        sent.append(progress)

    throttled = ThrottledProgress(report, interval_s=0)
    for done in (1, 3, 2, 3, 4):
        await throttled(done, 4, None)
    assert sent == [1, 3, 4]

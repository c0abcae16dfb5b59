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

    await trio.sleep(0.06)
    await throttled(3, 4, "later")
    assert sent[-1] == (3, 4, "later")  # once the interval has passed, the next report goes out

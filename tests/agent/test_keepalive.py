"""The agent's keepalive ping: right after each heartbeat, at least every interval, and a dead hub is dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
import trio_websocket

from sonde.agent.connection import keep_alive
from sonde.transport import CLOSE_GOING_AWAY


@dataclass
class FakeWebSocket:
    answer: bool = True
    gone: bool = False  # the connection closed: a ping raises
    pings: list[float] = field(default_factory=list)
    closed: list[tuple[int, str]] = field(default_factory=list)

    async def ping(self) -> None:
        self.pings.append(trio.current_time())
        if self.gone:
            raise trio_websocket.ConnectionClosed(
                trio_websocket.CloseReason(1001, "the hub is shutting down")
            )
        if not self.answer:
            await trio.sleep_forever()

    async def aclose(self, code: int, reason: str) -> None:
        self.closed.append((code, reason))


def every(interval_s: float) -> Any:
    start = trio.current_time()
    beat = 0

    async def heartbeat_sent() -> None:
        nonlocal beat
        beat += 1
        await trio.sleep_until(start + beat * interval_s)

    return heartbeat_sent


async def test_pings_follow_the_heartbeats(autojump_clock: trio.testing.MockClock) -> None:
    ws = FakeWebSocket()
    start = trio.current_time()
    with trio.move_on_after(35):
        await keep_alive(ws, every(10.0), interval_s=30.0)  # type: ignore[arg-type]
    assert [round(t - start, 3) for t in ws.pings] == [10.0, 20.0, 30.0]
    assert ws.closed == []


async def test_without_heartbeats_it_pings_every_interval(autojump_clock: trio.testing.MockClock) -> None:
    ws = FakeWebSocket()
    start = trio.current_time()
    with trio.move_on_after(95):
        await keep_alive(ws, every(3600.0), interval_s=30.0)  # type: ignore[arg-type]
    assert [round(t - start, 3) for t in ws.pings] == [30.0, 60.0, 90.0]


async def test_a_hub_that_does_not_pong_is_dropped(autojump_clock: trio.testing.MockClock) -> None:
    ws = FakeWebSocket(answer=False)
    start = trio.current_time()
    assert await keep_alive(ws, every(10.0), interval_s=30.0)  # type: ignore[arg-type]
    assert trio.current_time() - start == 40.0  # first ping after the heartbeat at 10 s, no pong for 30 s
    assert ws.closed == [(CLOSE_GOING_AWAY, "keepalive timeout")]


async def test_a_connection_closed_otherwise_is_not_a_drop(autojump_clock: trio.testing.MockClock) -> None:
    # the daemon tells the hub's own close (it went away) from a close of the agent's (no pong)
    ws = FakeWebSocket(gone=True)
    assert await keep_alive(ws, every(10.0), interval_s=30.0) is False  # type: ignore[arg-type]
    assert ws.closed == []


async def test_a_late_pong_behind_frames_still_coming_is_no_dead_hub(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A busy agent reads the pong behind every request before it: its reader is behind, and
    the hub, whose frames it keeps taking, is alive. It dropped a healthy hub in a review."""
    ws = FakeWebSocket(answer=False)
    start = trio.current_time()
    with trio.move_on_after(100):
        # frames keep being taken: every late pong is forgiven
        await keep_alive(
            ws,  # type: ignore[arg-type]
            every(10.0),
            interval_s=30.0,
            heard_at=lambda: min(trio.current_time() - 1.0, start + 70.0),
        )
    assert ws.closed == []
    assert [round(t - start, 3) for t in ws.pings] == [10.0, 40.0, 70.0]  # each late: none dropped
    with trio.move_on_after(100):
        dropped = await keep_alive(ws, every(10.0), interval_s=30.0, heard_at=lambda: start + 70.0)  # type: ignore[arg-type]
    assert dropped
    assert ws.closed == [(CLOSE_GOING_AWAY, "keepalive timeout")]

"""Keep a tool call that waits on agents alive while it waits: a progress notification every
`KEEPALIVE_INTERVAL_S`.

Such a call (`ToolSpec.waits_on_agents`) may run as long as its probe's timeout, up to an
hour. A client that asked for progress is answered over SSE (`sonde.hub.mcp_answers`), so it
has its response headers at once, but it may still give up on a stream that stays silent
(Claude Code after 300 s, a proxy after its read timeout, often 60 s). The keepalive speaks
before they do: "waiting for alpha: system.network.traceroute, 30 s of 120 s".

Every notification of the call goes through one `CallProgress`, which sends them one at a
time and only with a progress above the last one sent (MCP: progress increases). A keepalive
counts seconds elapsed, with the call's deadline as the total; on a tool that counts its own
progress (health_check: agents checked of all) it keeps the tool's scale instead, from the
start: the last count (0 before the first) plus the fraction of the deadline gone, always
below 1, so it lies between the count the tool last sent and its next one.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TypeVar

import outcome
import trio

from sonde.hub.tools.base import AgentWait, ProgressFn

KEEPALIVE_INTERVAL_S = 15.0  # well inside a proxy's 60 s read timeout and Claude Code's 300 s idle one
MAX_FRACTION = 0.99  # a keepalive's share of a count: the tool's next count (+1) stays above it

T = TypeVar("T")


class CallProgress:
    """The progress notifications of one tool call, the tool's own and the keepalive's:
    sent one at a time, each only if its progress is above the last one sent."""

    def __init__(self, report: ProgressFn, *, tool_counts: bool = False) -> None:
        """``tool_counts``: the tool reports its own progress, on its own scale (from 0)."""
        self._report = report
        self._sending = trio.Lock()
        self._sent: float | None = None
        # the tool's last (count, total); None: it does not count, a keepalive counts seconds
        self._counted: tuple[float, float | None] | None = (0, None) if tool_counts else None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """The tool's own report (its scale: health_check's agents checked of all)."""
        async with self._sending:
            if self._sent is not None and progress <= self._sent:
                return
            self._counted = (progress, total)
            await self._send(progress, total, message)

    async def keepalive(self, wait: AgentWait, elapsed_s: float) -> None:
        """Say the call still waits, ``elapsed_s`` into it."""
        async with self._sending:
            progress, total, message = keepalive_report(wait, elapsed_s, self._counted)
            if self._sent is not None and progress <= self._sent:
                return  # past the deadline on a tool's scale: nothing above the last to say
            await self._send(progress, total, message)

    async def _send(self, progress: float, total: float | None, message: str | None) -> None:
        self._sent = progress
        await self._report(progress, total, message)


def keepalive_report(
    wait: AgentWait, elapsed_s: float, counted: tuple[float, float | None] | None
) -> tuple[float, float | None, str]:
    """A keepalive's (progress, total, message), ``elapsed_s`` into a call that waits on
    ``wait``; ``counted`` is the tool's own last (count, total), if it sent one."""
    seconds = round(elapsed_s)
    deadline = wait.deadline_s
    of_deadline = f"{seconds} s of {deadline:g} s" if deadline is not None else f"{seconds} s so far"
    if counted is None:
        return seconds, deadline, f"waiting for {wait.awaited}, {of_deadline}"
    count, total = counted
    fraction = min(elapsed_s / deadline, MAX_FRACTION) if deadline else MAX_FRACTION / 2
    done = "" if total is None else f" ({count:g} of {total:g} done)"  # None: the tool has not counted yet
    return math.floor(count) + fraction, total, f"waiting for {wait.awaited}{done}, {of_deadline}"


async def keep_alive(progress: CallProgress, wait: AgentWait, interval_s: float) -> None:
    """Report ``wait`` every ``interval_s`` (the first after one interval) until cancelled, each
    time saying the interval's count of seconds (15, 30, ...): what a slow event loop adds to it
    would only make the report ragged."""
    started = trio.current_time()
    ticks = 0
    while True:
        ticks += 1
        await trio.sleep_until(started + ticks * interval_s)
        await progress.keepalive(wait, ticks * interval_s)


async def call_kept_alive(
    call: Callable[[ProgressFn], Awaitable[T]],
    report: ProgressFn,
    wait: AgentWait,
    *,
    tool_counts: bool = False,
    interval_s: float = KEEPALIVE_INTERVAL_S,
) -> T:
    """``await call(progress)``, with a keepalive going while it runs and ended with it.

    ``progress`` is the call's `CallProgress` on ``report`` (``tool_counts``: the tool reports
    its own progress through it). The call's own exceptions come out as they were raised, not
    wrapped in an exception group by the keepalive's nursery.
    """
    progress = CallProgress(report, tool_counts=tool_counts)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_alive, progress, wait, interval_s)
        result = await outcome.acapture(call, progress)
        nursery.cancel_scope.cancel()
    return result.unwrap()

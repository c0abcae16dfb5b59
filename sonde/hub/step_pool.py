"""A fan-out's steps, run by a pool of workers where a slow step does not keep its worker.

A fixed pool of workers takes the steps in order, so a thousand agents do not mean thousands
of tasks. A step that hangs (its agent stopped answering, a stuck mount under a probe) held its
worker until the caller's deadline: among 10,000 agents (3 steps each), 86 hanging took every
worker of a `health_check`'s 256, and the agents after them were never asked, and were reported
timed out, healthy as they were. Here a step running `SLOW_STEP_S` is left to its worker alone
and another worker takes the worker's place (at most ``max_set_aside`` times); the worker ends
with its step. Each look for slow steps also calls ``on_watch`` (the hub gives back the fan-out
places of slow probes there, `HubPlaces.give_back_slow`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

from sonde.hub.executor_limits import SLOW_STEP_S

J = TypeVar("J")

WATCH_EVERY_S = SLOW_STEP_S / 4


class _Worker:
    __slots__ = ("set_aside", "since")

    def __init__(self) -> None:
        self.since: float | None = None  # when its step started; None between steps
        self.set_aside = False  # replaced: it ends with its step


async def run_pool(
    jobs: Sequence[J],
    run: Callable[[J], Awaitable[None]],
    *,
    workers: int,
    max_set_aside: int,
    on_watch: Callable[[], object] = lambda: None,
    slow_s: float = SLOW_STEP_S,
) -> None:
    """``run`` every job, in order, at most ``workers`` at once but for those slow to end."""
    cursor = 0
    crew: set[_Worker] = set()  # the workers not set aside
    set_aside = 0

    async def work(me: _Worker) -> None:
        nonlocal cursor
        try:
            while cursor < len(jobs) and not me.set_aside:
                job = jobs[cursor]
                cursor += 1
                me.since = trio.current_time()
                await run(job)
                me.since = None
        finally:
            crew.discard(me)

    def start(nursery: trio.Nursery) -> None:
        me = _Worker()
        crew.add(me)
        nursery.start_soon(work, me)

    async def watch(nursery: trio.Nursery) -> None:
        nonlocal set_aside
        while True:
            await trio.sleep(WATCH_EVERY_S)
            on_watch()
            cutoff = trio.current_time() - slow_s
            for me in [w for w in crew if w.since is not None and w.since <= cutoff]:
                if set_aside >= max_set_aside or cursor >= len(jobs):
                    break
                me.set_aside = True
                crew.discard(me)
                set_aside += 1
                start(nursery)  # open: ``me`` runs in it still

    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as nursery:
            for _ in range(min(workers, len(jobs))):
                start(nursery)
            if jobs:
                outer.start_soon(watch, nursery)
        outer.cancel_scope.cancel()

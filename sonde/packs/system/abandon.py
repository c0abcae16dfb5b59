"""Thread work that stops when its probe gives up.

A probe cancelled (at its deadline, or by its caller) returns at once, but its worker
thread cannot be interrupted: it runs on, counted as stuck (`sonde.packs.context.ProbeThreads`),
and while too many are stuck every thread-backed probe is refused. So long work runs
through `in_thread_until_given_up`, which hands it a flag set when the probe leaves; the
work looks at the flag as it goes (`raise_if_given_up`, or `StopCheck` every
`STOP_CHECK_EVERY` entries of a walk) and raises `Abandoned`, which ends the thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sonde.packs.context import ProbeContext

T = TypeVar("T")
STOP_CHECK_EVERY = 256  # entries a walk visits between two looks at its stop flag


class Abandoned(Exception):
    """The probe gave up on this work (its deadline passed, or it was cancelled): nobody reads it."""


def raise_if_given_up(stop: threading.Event | None) -> None:
    """Raise `Abandoned` once ``stop`` is set (None: work nobody can stop)."""
    if stop is not None and stop.is_set():
        raise Abandoned("the probe gave up on this work")


@dataclass
class StopCheck:
    """Counts the entries of a long walk and looks at ``stop`` every `STOP_CHECK_EVERY` of them."""

    stop: threading.Event | None = None
    entries: int = 0

    def step(self) -> None:
        """Count one entry; raises `Abandoned` when it is time to look and the probe has given up."""
        self.entries += 1
        if self.entries % STOP_CHECK_EVERY == 0:
            raise_if_given_up(self.stop)


async def in_thread_until_given_up(ctx: ProbeContext, work: Callable[..., T], *args: Any) -> T:
    """``work(*args, stop)`` in a worker thread (`ProbeContext.in_thread`: it may refuse); the
    flag ``stop`` is set when this call ends, returned or cancelled, so work still running
    past it can stop."""
    stop = threading.Event()
    try:
        return await ctx.in_thread(work, *args, stop)
    finally:
        stop.set()

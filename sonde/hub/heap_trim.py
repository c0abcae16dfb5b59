"""The hub process gives freed C-heap memory back to the system after connection churn.

A storm of agents connecting (every agent after a hub restart) passes hundreds of
KiB of transient objects per register through the hub: the frame's text and its
parsed forms, and the packs' descriptions before they are found shared. The large
ones come from the C library's allocator, which keeps what is freed between live
blocks for reuse and returns only the free top of its heap to the system. Measured
with 1,000 agents connecting 96 at a time (benchmarks, scale scenario): the hub's
RSS stayed 24 MiB above what it held, 24 KiB per agent, until ``malloc_trim(0)``
gave those pages back.

So, for the `sonde hub` process only, where the C library is glibc: once at least
`TRIM_AFTER` connections have opened or closed since the last trim, and none did in
the last `CHECK_EVERY_S` (the storm is over), or `AT_LEAST_EVERY_S` have passed
(one that does not end), `malloc_trim(0)` runs in a worker thread, off the event
loop: 5 ms on a 300 MB heap with nothing to give back, 48 ms giving back 480 MB
(glibc holds the heap's lock meanwhile, so the loop's own large allocations may
wait for it that long). Elsewhere (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass

import trio

from sonde.hub.gc_policy import Churn

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
TRIM_AFTER = 100  # connections opened or closed since the last trim
AT_LEAST_EVERY_S = 60.0  # while connections keep coming, between trims


def churned(connections: Churn) -> int:
    """Connections opened or closed in this process so far (each counts when it opens and when it closes)."""
    return connections.open_now() + 2 * connections.closed_total()


@dataclass
class TrimPolicy:
    """When returning freed memory is worth a trim; ``now`` in seconds on any monotonic clock."""

    last_at: float
    churn_at_last: int = 0
    churn_before: int = 0  # at the previous check

    def due(self, now: float, churn: int) -> bool:
        """Whether to trim now, at a check that sees ``churn`` (kept for the next one's quiet test)."""
        quiet = churn == self.churn_before
        self.churn_before = churn
        if churn - self.churn_at_last < TRIM_AFTER:
            return False
        return quiet or now - self.last_at >= AT_LEAST_EVERY_S

    def trimmed(self, now: float, churn: int) -> None:
        self.last_at = now
        self.churn_at_last = churn


def libc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


async def govern_heap(
    connections: Churn,
    check_every_s: float = CHECK_EVERY_S,
    trim: Callable[[int], int] | None = None,
) -> None:
    """Trim the C heap as `TrimPolicy` says, until cancelled; nothing without ``malloc_trim``."""
    trim = trim or libc_malloc_trim()
    if trim is None:
        log.debug("no malloc_trim in this C library: freed heap memory stays with the process")
        return
    policy = TrimPolicy(last_at=trio.current_time())
    while True:
        await trio.sleep(check_every_s)
        churn = churned(connections)
        if policy.due(trio.current_time(), churn):
            await trio.to_thread.run_sync(trim, 0)
            log.debug("heap trimmed after %d connections opened or closed", churn - policy.churn_at_last)
            policy.trimmed(trio.current_time(), churn)

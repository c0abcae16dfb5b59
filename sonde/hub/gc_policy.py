"""The hub process's garbage-collection policy: young collections only, full ones after churn.

Measured with 10,000 agents held (benchmarks, scale scenario): nearly every
object the hub has is alive (tasks, cancel scopes, sockets and records of
connected agents), yet CPython's automatic full collections walked all of them
every 10-40 s, 2.5-8 s each, freeing next to nothing. They stalled probes for
seconds and were a third of the hub's idle CPU.

So, for the `sonde hub` process only:

- what start-up built (modules, models, the SDK) is frozen out of the
  collector's sight (`gc.freeze`);
- young generations are collected as usual, just less often (cheap: they only
  hold recent objects, and short-lived cycles die there);
- automatic full collections are off. Objects that survive the young
  generations are long-lived connection state; what of it becomes cyclic
  garbage comes from connections that closed (about 25 objects, 3 KiB, for
  every HTTP or WebSocket connection, agent or not) and from MCP sessions that
  ended (about 50 objects each; a client may open and end them over one
  connection that never closes), so `govern_gc` runs a
  full collection when enough connections have closed since the last one
  (10 % of those open, at least 100), at most every 5 minutes, and in any case
  every 6 hours when any closed at all (a session's end counts as a close). With a steady fleet the hub never
  pauses for a full collection; after churn it pauses once (about 0.3 ms per
  connected agent) and reclaims what the leavers left. (Counting departed
  agents alone, as this first did, let a client that opened and closed
  connections grow the hub's memory without end.)
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import trio

log = logging.getLogger(__name__)

GEN0_THRESHOLD = 20_000  # allocations between young collections (CPython's default is 700)
GEN1_THRESHOLD = 5
GEN2_THRESHOLD_NEVER = 1_000_000_000  # young collections before a full one is even considered
CHECK_EVERY_S = 30.0
MIN_INTERVAL_S = 300.0
MAX_INTERVAL_S = 6 * 3600.0
CHURN_FRACTION = 0.10
CHURN_MIN = 100


def configure_gc() -> None:
    """Freeze what start-up built and turn automatic full collections off (process-wide)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD_NEVER)
    log.info(
        "garbage collection: %d start-up objects frozen; full collections only after connections close",
        gc.get_freeze_count(),
    )


@dataclass
class FullCollectionPolicy:
    """When a full collection is worth its pause; ``now`` in seconds on any monotonic clock."""

    last_at: float
    closed_at_last: int = 0

    def due(self, now: float, open_now: int, closed_total: int) -> bool:
        churn = closed_total - self.closed_at_last
        since = now - self.last_at
        if churn <= 0 or since < MIN_INTERVAL_S:
            return False
        return since >= MAX_INTERVAL_S or churn >= max(CHURN_MIN, CHURN_FRACTION * open_now)

    def collected(self, now: float, closed_total: int) -> None:
        self.last_at = now
        self.closed_at_last = closed_total


class Churn(Protocol):
    """What `govern_gc` reads: how many connections are open, and how many have closed so far."""

    def open_now(self) -> int: ...

    def closed_total(self) -> int: ...


async def govern_gc(churn: Churn, check_every_s: float = CHECK_EVERY_S) -> None:
    """Run full collections as `FullCollectionPolicy` says, until cancelled."""
    policy = FullCollectionPolicy(last_at=trio.current_time())
    while True:
        await trio.sleep(check_every_s)
        closed = churn.closed_total()
        if not policy.due(trio.current_time(), churn.open_now(), closed):
            continue
        started = time.perf_counter()
        freed = gc.collect()
        log.info(
            "full garbage collection after %d connections closed or MCP sessions ended: %d objects freed in %.2f s",
            closed - policy.closed_at_last,
            freed,
            time.perf_counter() - started,
        )
        policy.collected(trio.current_time(), closed)

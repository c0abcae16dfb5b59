"""A hub-wide budget for the audit rows that callers without credentials can cause at will.

A failed login, a refused enrollment, a refused agent connection: each is on the
record, but nothing stops a stranger from causing thousands a second, from as
many addresses as they like, and every one would be a row on disk for good. So
these rows draw on one token bucket (`BURST` at once, `PER_S` a second after
that); past it they are counted by action, not kept, and the counts go on the
chain as one ``audit.suppressed`` entry at most every `SUMMARY_EVERY_S` (and
when the hub stops). Rows of callers with a valid key never draw on it.
"""

from __future__ import annotations

import time
from collections import Counter

from sonde.hub.audit import AuditEntry

BURST = 120
PER_S = 2.0
SUMMARY_EVERY_S = 60.0
SUPPRESSED_ACTION = "audit.suppressed"


class UnauthenticatedBudget:
    def __init__(
        self, burst: int = BURST, per_s: float = PER_S, summary_every_s: float = SUMMARY_EVERY_S
    ) -> None:
        self._burst = float(burst)
        self._per_s = per_s
        self._summary_every_s = summary_every_s
        self._tokens = float(burst)
        self._refilled = time.monotonic()
        self._suppressed: Counter[str] = Counter()
        self._since = 0.0  # wall time of the first suppressed entry not yet summarized
        self._counted: dict[str, int] = {}  # what the last summary counted
        self._summarized = time.monotonic()

    def admit(self, entry: AuditEntry) -> bool:
        """True if ``entry`` is kept; else it is counted for the next summary."""
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._per_s)
        self._refilled = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        if not self._suppressed:
            self._since = entry.ts
        self._suppressed[entry.action] += 1
        return False

    def due_in(self) -> float:
        """Seconds until a summary is due (`math.inf` while nothing was suppressed)."""
        if not self._suppressed:
            return float("inf")
        return max(0.0, self._summarized + self._summary_every_s - time.monotonic())

    def summary(self, final: bool = False) -> AuditEntry | None:
        """The ``audit.suppressed`` entry, when one is due (or ``final``); `written` resets the counts."""
        if not self._suppressed or (not final and self.due_in() > 0):
            return None
        self._counted = dict(self._suppressed)
        return AuditEntry(
            actor="hub",
            action=SUPPRESSED_ACTION,
            target=None,
            outcome="not_kept",
            detail={
                "suppressed": dict(self._counted),
                "since": self._since,
                "reason": f"more than {self._burst:g} at once or {self._per_s:g}/s from callers without credentials",
            },
        )

    def written(self) -> None:
        """The last `summary` is on the chain: what it counted is not counted again."""
        self._suppressed.subtract(self._counted)
        self._suppressed = +self._suppressed  # drop the zeros: what came in meanwhile stays
        self._counted = {}
        self._since = time.time()
        self._summarized = time.monotonic()

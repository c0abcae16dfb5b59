"""How many frames a link takes only to throw away before it ends: a peer's flood stops there.

Each frame is parsed and checked before it can be thrown away, and a 1 MiB one costs the event
loop milliseconds, which every other link waits (a review: another agent's probe went from 9 to
122 ms at the median under such a flood). A link ends (1008, `sonde.runtime.FrameRefused`) once
its peer sends

- more than `DROPPED_PER_MINUTE_MAX` frames that cannot be read within a minute (a peer of
  another version sends a frame this side does not know now and then: a few a minute), or
- more than `LATE_REPLIES_SLACK` replies beyond the requests this side gave up on (each request
  given up on, at its timeout or its caller's cancel, may still be answered once, late).
"""

from __future__ import annotations

DROPPED_PER_MINUTE_MAX = 120
LATE_REPLIES_SLACK = 8
MINUTE_S = 60.0


class FrameBudget:
    def __init__(self, now: float) -> None:
        self.dropped = 0
        self.late = 0
        self.given_up = 0
        self._dropped_this_minute = 0
        self._minute_started = now

    def drop(self, now: float) -> str | None:
        """Count a frame that could not be read; why the link must end, or None."""
        self.dropped += 1
        if now - self._minute_started >= MINUTE_S:
            self._minute_started, self._dropped_this_minute = now, 0
        self._dropped_this_minute += 1
        if self._dropped_this_minute > DROPPED_PER_MINUTE_MAX:
            return f"dropped {self._dropped_this_minute} frames within a minute: none could be read"
        return None

    def give_up(self) -> None:
        """Count a request that ended without its reply: it may still be answered once, late."""
        self.given_up += 1

    def late_reply(self) -> str | None:
        """Count a reply no request waits for; why the link must end, or None."""
        self.late += 1
        if self.late > self.given_up + LATE_REPLIES_SLACK:
            return f"{self.late} replies to requests not waiting for one ({self.given_up} given up on)"
        return None

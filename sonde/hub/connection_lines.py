"""The hub's log lines of agents coming online, going offline and being held: each said on its
own until a burst, then counted.

A fleet that reconnects at once (the hub restarted, a network back) wrote a line per agent per
event: 3,000 agents made 6,000 lines, and a fleet held after an upgrade 3,000 warnings of 600
bytes, each naming a per-agent command; the burst outran stderr and lines were dropped. Now
each kind of event has `PER_WINDOW` lines of its own every `WINDOW_S`; past that the events are
counted, and one line says how many more (`flush`, run every `WINDOW_S` by `open_hub`'s
`say_connection_counts`, and as the hub stops). The audit log keeps every connection.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

log = logging.getLogger("sonde.hub.agent_socket")  # the count lines go where the agents' own lines go
PER_WINDOW = 20  # lines of one kind said one by one in each window
WINDOW_S = 10.0
# what the count line says of each kind, and its level
KINDS = {
    "online": ("came online", logging.INFO),
    "offline": ("went offline", logging.INFO),
    "held": (
        "were held as degraded, their attestation changed since it was accepted; "
        "`sonde hub agent list` shows them, `sonde hub agent accept --all` accepts every held agent",
        logging.WARNING,
    ),
}


class ConnectionLines:
    """Counts each kind's lines in the current window; says them while under `PER_WINDOW`."""

    def __init__(self, per_window: int = PER_WINDOW, window_s: float = WINDOW_S) -> None:
        self.per_window = per_window
        self.window_s = window_s
        self._started = time.monotonic()
        self._said = dict.fromkeys(KINDS, 0)
        self._unsaid = dict.fromkeys(KINDS, 0)

    def say(self, kind: str, logger: logging.Logger, level: int, message: str, *args: Any) -> None:
        """Log ``message`` (``kind``: a key of `KINDS`) unless this window has had its lines of that kind."""
        if not logger.isEnabledFor(level):  # a line nobody would see (the hub stopping): nothing to count
            return
        if time.monotonic() - self._started >= self.window_s:
            self.flush()
        if self._said[kind] < self.per_window:
            self._said[kind] += 1
            logger.log(level, message, *args)
        else:
            self._unsaid[kind] += 1

    def flush(self) -> None:
        """Say how many of each kind went unsaid in the window ending now; begin the next."""
        for kind, count in self._unsaid.items():
            if count:
                what, level = KINDS[kind]
                log.log(level, "%d more agent(s) %s in the last %g s", count, what, self.window_s)
        self._started = time.monotonic()
        self._said = dict.fromkeys(KINDS, 0)
        self._unsaid = dict.fromkeys(KINDS, 0)


LINES = ConnectionLines()


async def say_connection_counts(lines: ConnectionLines = LINES) -> None:
    """Until cancelled: `ConnectionLines.flush` every window, and once more as the hub stops."""
    try:
        while True:
            await trio.sleep(lines.window_s)
            lines.flush()
    finally:
        lines.flush()

"""The hub's looks at its own database for what the CLI changed: agents removed, changed
attestations accepted, tags set. Each is one look every few seconds; a look that fails is said
and made again next time, never the end of the hub.

A look is a read, and a read needed a new connection to the file: a hub out of file
descriptors (thousands of connections at once) could not open one, the failure escaped the
watcher, and the hub stopped, blaming its data directory's permissions. Reads now use
connections the store opened at its start; a look can still fail as any read can (a damaged
or vanished file, an I/O error).
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Awaitable, Callable
from typing import NoReturn

import trio

log = logging.getLogger(__name__)

SAY_EVERY_S = 60.0


async def look_every(every_s: float, what: str, look: Callable[[], Awaitable[None]]) -> NoReturn:
    """Until cancelled: wait ``every_s``, then ``look``. A look the database refused (SQLite's
    errors, an OSError) is logged at most once a minute, with how many failed since, and made
    again after the next wait."""
    failed = 0
    said_at = -math.inf
    while True:
        await trio.sleep(every_s)
        try:
            await look()
        except (sqlite3.Error, OSError) as exc:
            failed += 1
            now = trio.current_time()
            if now - said_at >= SAY_EVERY_S:
                log.warning(
                    "could not look for %s in the hub's database (%s; %d look(s) failed since this was "
                    "last said); looking again every %g s",
                    what,
                    exc,
                    failed,
                    every_s,
                )
                said_at, failed = now, 0

"""A warning before the disk under the hub's data directory fills up.

When it is full the audit log cannot be written and the hub refuses every call
(`sonde.hub.audit_queue`); an operator should hear of it before that. The hub
checks every `CHECK_EVERY_S` and says so once when space runs low (under
`LOW_FREE_BYTES`, or under `LOW_FREE_FRACTION` of the filesystem), and once
when there is room again.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import trio

log = logging.getLogger(__name__)

CHECK_EVERY_S = 300.0
LOW_FREE_BYTES = 256 * 2**20
LOW_FREE_FRACTION = 0.02


def low_on_space(path: Path, min_free_bytes: int = LOW_FREE_BYTES) -> str | None:
    """How little room is left under ``path``, in words; None while there is enough."""
    usage = shutil.disk_usage(path)
    if usage.free >= max(min_free_bytes, LOW_FREE_FRACTION * usage.total):
        return None
    return f"{usage.free / 2**20:.0f} MiB free of {usage.total / 2**30:.1f} GiB"


async def watch_free_space(
    path: Path, every_s: float = CHECK_EVERY_S, min_free_bytes: int = LOW_FREE_BYTES
) -> None:
    """Check ``path``'s filesystem every ``every_s`` until cancelled; log when it runs low and recovers."""
    was_low = False
    while True:
        try:
            low = await trio.to_thread.run_sync(low_on_space, path, min_free_bytes)
        except OSError as exc:  # the directory went away: the store will say more
            log.debug("cannot check the free space under %s: %s", path, exc)
            low = None
        if low is not None and not was_low:
            log.warning(
                "the hub's data directory %s is low on space (%s): when it is full the audit log "
                "cannot be written and the hub refuses calls until there is room",
                path,
                low,
            )
        elif low is None and was_low:
            log.info("the hub's data directory %s has room again", path)
        was_low = low is not None
        await trio.sleep(every_s)

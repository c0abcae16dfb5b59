"""Times as the hub writes them, in UTC to the second: one form for what programs and models
read (tool results, stored records), one for what people read (tables, messages)."""

from __future__ import annotations

import time


def iso_utc(ts: float) -> str:
    """``ts`` (Unix time) in ISO 8601, as tool results and records carry it: ``2026-11-26T07:08:06Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def utc_text(ts: float) -> str:
    """``ts`` as people read it in a table or a message: ``2026-11-26 07:08:06Z``."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))

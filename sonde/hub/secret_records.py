"""What API keys and enrollment tokens share: a secret is stored only as its SHA-256 hex,
and a record's times are shown in UTC, to the second."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime


def hash_secret(secret: str) -> str:
    """The stored form of a key's or token's secret; the secret itself is never stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def now_or(now: float | None) -> float:
    """``now`` when a caller (a test, a batch) fixes the time, else the wall clock."""
    return time.time() if now is None else now


def iso_utc(ts: float) -> str:
    """``2026-11-26T07:08:06Z``."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

"""What API keys and enrollment tokens share: a secret is stored only as its SHA-256 hex,
and a caller may fix the time."""

from __future__ import annotations

import hashlib
import time


def hash_secret(secret: str) -> str:
    """The stored form of a key's or token's secret; the secret itself is never stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def now_or(now: float | None) -> float:
    """``now`` when a caller (a test, a batch) fixes the time, else the wall clock."""
    return time.time() if now is None else now

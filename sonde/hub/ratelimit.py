"""Slow down key guessing: failed authentications per client address.

After ``max_failures`` failures inside ``window_s`` an address (an IPv6 one's /64:
`sonde.hub.client_keys`) gets 429 with
Retry-After for every attempt without a valid key until its oldest failure
leaves the window. A valid key is always served: the address may be a proxy or
a NAT shared with whoever is guessing, and a guess at a 256-bit key gains
nothing from the answer's speed.
Memory is bounded: at most ``max_addresses`` addresses are remembered.
"""

from __future__ import annotations

import time
from collections import deque

from sonde.hub.client_keys import client_key

MAX_FAILURES = 30
WINDOW_S = 60.0
MAX_ADDRESSES = 10_000


class FailureLimiter:
    def __init__(
        self, max_failures: int = MAX_FAILURES, window_s: float = WINDOW_S, max_addresses: int = MAX_ADDRESSES
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_addresses = max_addresses
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, address: str, now: float | None = None) -> float | None:
        """Seconds until ``address`` may try again, or None when it may try now."""
        now = time.monotonic() if now is None else now
        address = client_key(address)
        failures = self._failures.get(address)
        if failures is None:
            return None
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        if len(failures) < self.max_failures:
            return None
        return max(0.0, failures[0] + self.window_s - now)

    def failed(self, address: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        address = client_key(address)
        if address not in self._failures and len(self._failures) >= self.max_addresses:
            self._failures.pop(next(iter(self._failures)))
        self._failures.setdefault(address, deque(maxlen=self.max_failures)).append(now)

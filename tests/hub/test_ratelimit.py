"""Failed-authentication limiting per address."""

from __future__ import annotations

from sonde.hub.ratelimit import FailureLimiter


def test_blocks_after_too_many_failures_then_forgives() -> None:
    limiter = FailureLimiter(max_failures=3, window_s=10)
    for t in (0.0, 1.0, 2.0):
        assert limiter.retry_after("a", now=t) is None
        limiter.failed("a", now=t)
    assert limiter.retry_after("a", now=2.5) == 7.5
    assert limiter.retry_after("b", now=2.5) is None  # other addresses are not affected
    assert limiter.retry_after("a", now=10.5) is None  # the first failure left the window


def test_remembers_a_bounded_number_of_addresses() -> None:
    limiter = FailureLimiter(max_failures=1, window_s=100, max_addresses=2)
    for address in ("a", "b", "c"):
        limiter.failed(address, now=0)
    assert limiter.retry_after("a", now=1) is None  # forgotten to make room
    assert limiter.retry_after("c", now=1) is not None

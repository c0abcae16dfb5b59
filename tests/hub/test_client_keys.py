"""The per-address bounds count an IPv6 client by its /64."""

from __future__ import annotations

import pytest

from sonde.hub.client_keys import client_key
from sonde.hub.ratelimit import FailureLimiter
from sonde.hub.tcp_guard import WaitingConnections


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
        ("fe80::1%eth0", "fe80::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("::1", "::/64"),
        ("not an address", "not an address"),
    ],
)
def test_client_key(address: str, key: str) -> None:
    assert client_key(address) == key


def test_an_ipv6_host_cannot_step_past_the_failure_limit_by_changing_address() -> None:
    limiter = FailureLimiter(max_failures=3)
    for n in range(3):
        limiter.failed(f"2001:db8:1:2::{n + 1:x}", now=0.0)
    assert limiter.retry_after("2001:db8:1:2::99", now=1.0) is not None
    assert limiter.retry_after("2001:db8:1:3::1", now=1.0) is None  # another network


def test_an_ipv6_host_cannot_step_past_the_idle_bound_by_changing_address() -> None:
    waiting = WaitingConnections(limit=2)
    assert waiting.admit("2001:db8::1")
    assert waiting.admit("2001:db8::2")
    assert not waiting.admit("2001:db8::3")
    waiting.started("2001:db8::1")
    assert waiting.admit("2001:db8::4")

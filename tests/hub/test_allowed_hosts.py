"""--allowed-host values: what a Host header can hold is taken, as given."""

from __future__ import annotations

from sonde.hub.config import split_hosts


def test_every_form_a_host_header_holds_is_taken() -> None:
    given = ("hub.example.com", "HUB.example.com:8443", "hub.example.com:*", "10.0.0.5", "[::1]:3000")
    zoned = "[fe80::1%25eth0]"  # RFC 6874: a link-local address with its zone
    assert split_hosts((" ".join(given), zoned)) == (*given, zoned)

"""Whose address a request has behind a trusted reverse proxy (`sonde.hub.proxies`)."""

from __future__ import annotations

import ipaddress
import re

import pytest

from sonde.hub.proxies import forwarded_client, parse_trusted_proxies

PROXY = "10.0.0.5"
TRUSTED = parse_trusted_proxies(["10.0.0.5", "192.168.0.0/16"])


def test_addresses_and_networks_in_one_value_or_several() -> None:
    assert parse_trusted_proxies(["10.0.0.5, 192.168.0.0/16", "::1"]) == (
        ipaddress.ip_network("10.0.0.5/32"),
        ipaddress.ip_network("192.168.0.0/16"),
        ipaddress.ip_network("::1/128"),
    )
    assert parse_trusted_proxies(["10.1.2.3/8"]) == (ipaddress.ip_network("10.0.0.0/8"),)  # as meant


@pytest.mark.parametrize("value", ["proxy.example", "10.0.0.5:443", "10.0.0.0/33", "*"])
def test_anything_else_is_refused_by_name(value: str) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"--trusted-proxy '{value}' is not an IP address or network")
    ):
        parse_trusted_proxies([f"10.0.0.1,{value}"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        (PROXY, ["203.0.113.7"], "203.0.113.7"),
        # a client that writes its own header is only believed as far as the proxy appended
        (PROXY, ["1.2.3.4, 203.0.113.7"], "203.0.113.7"),
        # two trusted hops (a load balancer, then nginx), in one header line or two
        (PROXY, ["203.0.113.7, 192.168.1.1"], "203.0.113.7"),
        (PROXY, ["1.2.3.4, 203.0.113.7", "192.168.1.1"], "203.0.113.7"),
        (PROXY, ["2001:db8::7"], "2001:db8::7"),
        (PROXY, ["192.168.1.1, 192.168.1.2"], "192.168.1.1"),  # every hop trusted: the first
        (PROXY, ["203.0.113.7, unknown"], PROXY),  # what the trusted hop wrote is no address
        (PROXY, ["203.0.113.7:5123"], PROXY),
        (PROXY, ["not an address, 203.0.113.7"], "203.0.113.7"),
        ("::ffff:10.0.0.5", ["203.0.113.7"], "203.0.113.7"),  # a dual-stack socket's view of the proxy
        ("203.0.113.9", ["1.2.3.4"], "203.0.113.9"),  # not a trusted proxy: the header is the client's
        ("10.0.0.6", ["1.2.3.4"], "10.0.0.6"),
    ],
)
def test_the_client_is_the_rightmost_address_no_trusted_proxy_wrote(
    peer: str, forwarded: list[str], client: str
) -> None:
    assert forwarded_client(peer, forwarded, TRUSTED) == client


def test_no_trusted_proxy_means_no_header_is_believed() -> None:
    assert forwarded_client("127.0.0.1", ["203.0.113.7"], ()) == "127.0.0.1"

"""What the hub's per-address bounds count by: an IPv4 address, or an IPv6 address's /64.

One IPv6 host commonly holds a whole /64 and picks a new address in it at will (privacy
addresses, or any address of its network), so bounds kept per IPv6 address (failed
authentications, idle connections) bound nothing: they count by the /64, as an IPv4
address behind a NAT counts every machine behind it.
"""

from __future__ import annotations

import ipaddress

IPV6_PREFIX = 64


def client_key(address: str) -> str:
    """``address`` as the per-address bounds count it: itself, or the /64 of an IPv6 address
    (an IPv4-mapped one is its IPv4 address)."""
    if ":" not in address:
        return address
    try:
        parsed = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.IPv6Network((parsed, IPV6_PREFIX), strict=False))

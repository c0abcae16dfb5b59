"""The client's address behind a reverse proxy the operator trusts (``--trusted-proxy``).

Behind nginx or a load balancer every request reaches the hub from the proxy's
address, so the audit log, the failed-login limit and the agent socket's logs
would all name the proxy. A proxy says whom it serves in ``X-Forwarded-For``
(each hop appends the address it received from). That header is believed only
on a connection from an address the operator named, and read from the right:
the first address that is not itself a trusted proxy is the client (anything
left of it could have been written by the client). Without ``--trusted-proxy``
the header is ignored, so a client talking to the hub directly cannot name
itself anyone.

What the hub bounds per TCP connection (`sonde.hub.tcp_guard`) still sees the
proxy: that is the socket it holds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
FORWARDED_FOR = b"x-forwarded-for"
MAX_FORWARDED_HOPS = 32  # addresses read from the right; a longer chain is cut there


def parse_trusted_proxies(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """``--trusted-proxy`` values (each may list several, separated by commas or spaces) as
    networks: an address (``10.0.0.5``, ``::1``) or a network (``10.0.0.0/8``).

    Raises ValueError naming the value that is neither.
    """
    networks: list[IPNetwork] = []
    for value in values:
        for item in value.replace(",", " ").split():
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(
                    f"--trusted-proxy {item!r} is not an IP address or network (e.g. 10.0.0.5, 10.0.0.0/8, ::1)"
                ) from None
    return tuple(networks)


def is_trusted(address: str, trusted: tuple[IPNetwork, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # a dual-stack socket's ::ffff:10.0.0.5 is 10.0.0.5
    return any(ip in network for network in trusted)


def forwarded_client(peer: str, forwarded_for: list[str], trusted: tuple[IPNetwork, ...]) -> str:
    """The client's address for a request from ``peer`` that carried these ``X-Forwarded-For``
    values: ``peer`` itself unless it is trusted; else the rightmost address not trusted.

    A malformed entry ends the walk at the hop that wrote it (the trusted proxy's own view:
    its peer is the last address it vouches for). When every hop is trusted, the leftmost.
    """
    if not trusted or not is_trusted(peer, trusted):
        return peer
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",")]
    client = peer
    for hop in reversed(hops[-MAX_FORWARDED_HOPS:]):
        try:
            client = str(ipaddress.ip_address(hop))
        except ValueError:  # not an address (a port, a name, "unknown"): trust ends there
            return client
        if not is_trusted(client, trusted):
            return client
    return client


class ForwardedClientApp:
    """ASGI middleware: ``scope["client"]`` is the client behind a trusted proxy, for every
    request and agent socket, before anything reads it."""

    def __init__(self, app: Any, trusted: tuple[IPNetwork, ...]) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and client:
            forwarded = [
                v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == FORWARDED_FOR
            ]
            if forwarded:
                address = forwarded_client(str(client[0]), forwarded, self.trusted)
                if address != client[0]:
                    scope = {**scope, "client": (address, 0)}
        await self.app(scope, receive, send)

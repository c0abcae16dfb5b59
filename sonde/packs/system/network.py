"""Network interfaces: state, addresses and traffic counters."""

from __future__ import annotations

import socket
from typing import Any, Literal

import psutil

from sonde.packs.base import NoParams, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK

AddressFamily = Literal["ipv4", "ipv6", "mac"]
FAMILY_NAMES: dict[int, AddressFamily] = {
    socket.AF_INET: "ipv4",
    socket.AF_INET6: "ipv6",
    psutil.AF_LINK: "mac",
}


class InterfaceAddress(Result):
    family: AddressFamily
    address: str
    netmask: str | None


class InterfaceCounters(Result):
    bytes_sent: int
    bytes_received: int
    packets_sent: int
    packets_received: int
    errors_in: int
    errors_out: int
    drops_in: int
    drops_out: int


class NetworkInterface(Result):
    name: str
    is_up: bool
    mtu: int | None
    speed_mbps: int | None
    addresses: list[InterfaceAddress]
    counters: InterfaceCounters | None


class NetworkInterfaces(Result):
    interfaces: list[NetworkInterface]


def _addresses(raw: list[Any]) -> list[InterfaceAddress]:
    return [
        InterfaceAddress(family=FAMILY_NAMES[entry.family], address=entry.address, netmask=entry.netmask)
        for entry in raw
        if entry.family in FAMILY_NAMES and entry.address
    ]


def _counters(raw: Any) -> InterfaceCounters | None:
    if raw is None:
        return None
    return InterfaceCounters(
        bytes_sent=raw.bytes_sent,
        bytes_received=raw.bytes_recv,
        packets_sent=raw.packets_sent,
        packets_received=raw.packets_recv,
        errors_in=raw.errin,
        errors_out=raw.errout,
        drops_in=raw.dropin,
        drops_out=raw.dropout,
    )


def _read_interfaces() -> NetworkInterfaces:
    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    counters = psutil.net_io_counters(pernic=True)
    interfaces = []
    for name in sorted(set(addresses) | set(stats)):
        state = stats.get(name)
        interfaces.append(
            NetworkInterface(
                name=name,
                is_up=bool(state and state.isup),
                mtu=state.mtu if state else None,
                speed_mbps=state.speed if state and state.speed > 0 else None,
                addresses=_addresses(addresses.get(name, [])),
                counters=_counters(counters.get(name)),
            )
        )
    return NetworkInterfaces(interfaces=interfaces)


@PACK.probe(
    "system.network.interfaces",
    """Every network interface: name, whether it is up, MTU, link speed in Mbit/s (null
    when the driver does not say), its addresses (IPv4, IPv6 and MAC, with netmask) and
    traffic counters since boot (bytes and packets sent/received, errors and drops in/out).
    Use it for connectivity problems, a missing IP address, or a link dropping packets.""",
    timeout_s=5,
)
async def network_interfaces(ctx: ProbeContext, params: NoParams) -> NetworkInterfaces:
    return await ctx.in_thread(_read_interfaces)

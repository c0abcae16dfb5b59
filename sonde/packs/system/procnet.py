"""Parse the kernel's socket tables, /proc/net/{tcp,tcp6,udp,udp6}. Pure: text in, rows out.

Each row after the header reads::

    sl  local_address rem_address   st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000 107 0 10139 ...

An address is hex: 8 digits for IPv4, 32 for IPv6, printed as 32-bit words in the
host's byte order (so 127.0.0.1 reads ``0100007F`` on x86). The port is big-endian
hex. ``st`` is the TCP state; 0A is LISTEN, and an unconnected UDP socket shows 07.
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

Protocol = Literal["tcp", "udp"]
Family = Literal["ipv4", "ipv6"]
TCP_LISTEN = 0x0A
TCP_CLOSE = 0x07  # the state of a bound, unconnected UDP socket
WORD_HEX_DIGITS = 8
HEX_ADDRESS = re.compile(r"[0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}")
ROW_MIN_FIELDS = 10


@dataclass(frozen=True)
class ProcNetSocket:
    protocol: Protocol
    family: Family
    local_address: str
    local_port: int
    remote_address: str
    remote_port: int
    state: int
    uid: int
    inode: int


def decode_address(hex_address: str, byteorder: Literal["little", "big"] = sys.byteorder) -> str:
    """A /proc/net hex address (8 or 32 digits) as text: ``0100007F`` -> ``127.0.0.1``."""
    if not HEX_ADDRESS.fullmatch(hex_address):
        raise ValueError(f"not a /proc/net address: {hex_address!r}")
    words = (hex_address[i : i + WORD_HEX_DIGITS] for i in range(0, len(hex_address), WORD_HEX_DIGITS))
    packed = b"".join(int(word, 16).to_bytes(4, byteorder) for word in words)
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, packed)  # the same text psutil gives


def decode_endpoint(
    endpoint: str, byteorder: Literal["little", "big"] = sys.byteorder
) -> tuple[Family, str, int]:
    """``"0100007F:0CEA"`` -> ``("ipv4", "127.0.0.1", 3306)``."""
    hex_address, _, hex_port = endpoint.partition(":")
    family: Family = "ipv4" if len(hex_address) == 8 else "ipv6"
    return family, decode_address(hex_address, byteorder), int(hex_port, 16)


def _parse_row(line: str, protocol: Protocol, byteorder: Literal["little", "big"]) -> ProcNetSocket:
    fields = line.split()
    if len(fields) < ROW_MIN_FIELDS or not fields[0].endswith(":"):
        raise ValueError(f"not a /proc/net row: {line!r}")
    family, local_address, local_port = decode_endpoint(fields[1], byteorder)
    _, remote_address, remote_port = decode_endpoint(fields[2], byteorder)
    return ProcNetSocket(
        protocol=protocol,
        family=family,
        local_address=local_address,
        local_port=local_port,
        remote_address=remote_address,
        remote_port=remote_port,
        state=int(fields[3], 16),
        uid=int(fields[7]),
        inode=int(fields[9]),
    )


def parse_proc_net(
    lines: Iterable[str], protocol: Protocol, byteorder: Literal["little", "big"] = sys.byteorder
) -> Iterator[ProcNetSocket]:
    """The socket rows of one /proc/net table (an open file or a list of lines).

    The header line and malformed rows are skipped. Rows are yielded one at a time,
    so a table of a busy server never has to be held in memory whole.
    """
    rows = iter(lines)
    next(rows, None)  # the header
    for line in rows:
        try:
            yield _parse_row(line, protocol, byteorder)
        except ValueError:
            continue


def is_listening(entry: ProcNetSocket) -> bool:
    """A TCP socket in LISTEN, or a UDP socket bound to a port and connected to no peer."""
    if entry.protocol == "tcp":
        return entry.state == TCP_LISTEN
    return entry.state == TCP_CLOSE and entry.remote_port == 0 and entry.local_port != 0

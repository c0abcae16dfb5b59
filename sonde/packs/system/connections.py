"""TCP connections: counts per state and the connections themselves, with owning process.

Like `sonde.packs.system.listening`, psutil is asked first and the /proc/net
tables are the fallback; owners this user may not see keep ``pid: null``.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.listening import owners_note, socket_owners
from sonde.packs.system.processes import PROC_ROOT, process_labels
from sonde.packs.system.procnet import Family, parse_proc_net

# /proc/net/tcp "st" column -> the state names psutil uses
TCP_STATES = {
    0x01: "ESTABLISHED",
    0x02: "SYN_SENT",
    0x03: "SYN_RECV",
    0x04: "FIN_WAIT1",
    0x05: "FIN_WAIT2",
    0x06: "TIME_WAIT",
    0x07: "CLOSE",
    0x08: "CLOSE_WAIT",
    0x09: "LAST_ACK",
    0x0A: "LISTEN",
    0x0B: "CLOSING",
    0x0C: "SYN_RECV",
}
OWNERLESS_STATES = frozenset({"TIME_WAIT"})  # the kernel's alone: no process holds it
StateFilter = Literal["established", "listen", "time_wait", "close_wait", "all"]


class ConnectionParams(Params):
    state: StateFilter = Field(default="established", description="Which connections to list.")
    port: int | None = Field(
        default=None, ge=1, le=65535, strict=True, description="Only this local or remote port."
    )
    limit: int = Field(default=100, ge=1, le=1000, strict=True, description="At most this many connections.")


@dataclass(frozen=True)
class TcpConnection:
    family: Family
    local_address: str
    local_port: int
    remote_address: str
    remote_port: int
    state: str
    pid: int | None


class Connection(Result):
    family: Family
    local_address: str
    local_port: int
    remote_address: str
    remote_port: int
    state: str
    pid: int | None
    process_name: str | None


class Connections(Result):
    counts_by_state: dict[str, int]
    total: int
    connections: list[Connection]
    truncated: bool
    processes_visible: bool = Field(
        description="False when the owner of a listed connection is hidden (TIME_WAIT has none)."
    )
    source: Literal["psutil", "procfs"]
    note: str | None


def tcp_from_psutil() -> list[TcpConnection]:
    found = []
    for conn in psutil.net_connections(kind="tcp"):
        family: Family = "ipv4" if conn.family == socket.AF_INET else "ipv6"
        local, remote = conn.laddr, conn.raddr or None
        if not local:  # psutil gives () for an address it does not know
            continue
        found.append(
            TcpConnection(
                family,
                local.ip,
                local.port,
                remote.ip if remote else "",
                remote.port if remote else 0,
                conn.status,
                conn.pid,
            )
        )
    return found


def tcp_from_procfs(proc_root: Path = PROC_ROOT) -> list[TcpConnection]:
    owners = socket_owners(proc_root)
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with (proc_root / "net" / table).open() as lines:
                rows = list(parse_proc_net(lines, "tcp"))
        except FileNotFoundError:
            continue
        found += [
            TcpConnection(
                row.family,
                row.local_address,
                row.local_port,
                row.remote_address,
                row.remote_port,
                TCP_STATES.get(row.state, "UNKNOWN"),
                owners.get(row.inode),
            )
            for row in rows
        ]
    return found


def summarize(
    found: Iterable[TcpConnection], wanted: StateFilter, port: int | None = None
) -> tuple[dict[str, int], list[TcpConnection]]:
    """Counts per state over all of ``found``, and the ``wanted`` ones on ``port`` (if given), sorted."""
    every = list(found)
    counts = dict(sorted(Counter(conn.state for conn in every).items()))
    chosen = [
        c
        for c in every
        if (wanted == "all" or c.state == wanted.upper()) and port in (None, c.local_port, c.remote_port)
    ]
    chosen.sort(key=lambda c: (c.state, c.remote_address, c.remote_port, c.local_port))
    return counts, chosen


def _read(params: ConnectionParams) -> Connections:
    source: Literal["psutil", "procfs"] = "psutil"
    try:
        found = tcp_from_psutil()
    except psutil.AccessDenied:
        found, source = tcp_from_procfs(), "procfs"
    counts, chosen = summarize(found, params.state, params.port)
    shown = chosen[: params.limit]
    labels = process_labels({c.pid for c in shown if c.pid is not None})
    hidden = sum(1 for c in shown if c.pid is None and c.state not in OWNERLESS_STATES)
    return Connections(
        counts_by_state=counts,
        total=len(chosen),
        connections=[
            Connection(
                family=c.family,
                local_address=c.local_address,
                local_port=c.local_port,
                remote_address=c.remote_address,
                remote_port=c.remote_port,
                state=c.state,
                pid=c.pid,
                process_name=labels[c.pid].name if c.pid is not None else None,
            )
            for c in shown
        ],
        truncated=len(chosen) > len(shown),
        processes_visible=hidden == 0,
        source=source,
        note=owners_note(hidden),
    )


@PACK.probe(
    "system.network.connections",
    """TCP connections of this machine: counts per state (ESTABLISHED, TIME_WAIT,
    CLOSE_WAIT, LISTEN, ...) over all sockets, and the connections in the chosen `state`
    (default established), optionally only those on one local or remote `port`: local and
    remote address and port, state, and the owning PID and process name where this agent
    may see it (`processes_visible` is false when some owners are hidden; `note` then says
    why and what would show them). Use it for 'who is connected to this machine',
    connection leaks (many CLOSE_WAIT) or port exhaustion (many TIME_WAIT).""",
    timeout_s=15,
)
async def network_connections(ctx: ProbeContext, params: ConnectionParams) -> Connections:
    return await ctx.in_thread(_read, params)

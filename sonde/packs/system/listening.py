"""Sockets waiting for peers: listening TCP and bound, unconnected UDP.

``psutil.net_connections`` gives the table with owning PIDs. Where it is refused
(AccessDenied on some systems for non-root users), the kernel tables in
/proc/net are parsed instead (`sonde.packs.system.procnet`) and each socket's
inode is matched to the processes whose /proc/PID/fd this user may read.
Sockets of processes we may not inspect keep ``pid: null``.

A machine may hold tens of thousands of them: the answer lists at most ``limit`` (those
of one protocol or port when asked), and counts them all by protocol, so a cut list says
what it left out rather than ending where the executor's cap cut it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.privileges import (
    agent_user,
    effective_capabilities,
    other_users_fds_grant,
    sees_every_process,
)
from sonde.packs.system.processes import PROC_ROOT, process_labels
from sonde.packs.system.procnet import Family, Protocol, is_listening, parse_proc_net

PROC_NET_TABLES: tuple[tuple[str, Protocol], ...] = (
    ("tcp", "tcp"),
    ("tcp6", "tcp"),
    ("udp", "udp"),
    ("udp6", "udp"),
)
SOCKET_LINK_PREFIX = "socket:["
LISTED_MAX = 1000  # sockets one answer lists: some 130 bytes of JSON each, well within its cap


class ListeningParams(Params):
    protocol: Literal["tcp", "udp", "all"] = Field(default="all", description="Only TCP or only UDP sockets.")
    port: int | None = Field(
        default=None, ge=1, le=65535, strict=True, description="Only sockets on this port."
    )
    limit: int = Field(
        default=200, ge=1, le=LISTED_MAX, strict=True, description="At most this many sockets listed."
    )


@dataclass(frozen=True)
class BoundSocket:
    protocol: Protocol
    family: Family
    address: str
    port: int
    pid: int | None


class ListeningSocket(Result):
    protocol: Protocol
    family: Family
    address: str
    port: int
    pid: int | None
    process_name: str | None


class ListeningSockets(Result):
    sockets: list[ListeningSocket]
    tcp_listeners: int = Field(description="Listening TCP sockets on the machine, listed or not.")
    udp_listeners: int = Field(description="Bound UDP sockets on the machine, listed or not.")
    matched: int = Field(description="Sockets of the protocol and port asked for (all, when none was).")
    truncated: bool = Field(description="True when `limit` left some of the `matched` sockets out.")
    source: Literal["psutil", "procfs"]
    processes_visible: bool
    note: str | None


def listening_from_psutil() -> list[BoundSocket]:
    """Listening sockets from psutil; raises ``psutil.AccessDenied`` where it is refused."""
    found = []
    for conn in psutil.net_connections(kind="inet"):
        protocol: Protocol = "tcp" if conn.type == socket.SOCK_STREAM else "udp"
        if protocol == "tcp" and conn.status != psutil.CONN_LISTEN:
            continue
        if protocol == "udp" and (conn.raddr or not conn.laddr):
            continue
        family: Family = "ipv4" if conn.family == socket.AF_INET else "ipv6"
        local = conn.laddr
        if not local:  # psutil gives () for an address it does not know
            continue
        found.append(BoundSocket(protocol, family, local.ip, local.port, conn.pid))
    return found


def _socket_inodes(fd_dir: Path) -> Iterable[int]:
    try:
        fds = list(fd_dir.iterdir())
    except OSError:  # another user's process, or it exited
        return
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(SOCKET_LINK_PREFIX):
            yield int(target[len(SOCKET_LINK_PREFIX) : -1])


def socket_owners(proc_root: Path = PROC_ROOT) -> dict[int, int]:
    """Socket inode -> PID, for every process whose file descriptors this user may read."""
    owners: dict[int, int] = {}
    for pid_dir in proc_root.iterdir():
        if pid_dir.name.isdigit():
            for inode in _socket_inodes(pid_dir / "fd"):
                owners.setdefault(inode, int(pid_dir.name))
    return owners


def listening_from_procfs(proc_root: Path = PROC_ROOT) -> list[BoundSocket]:
    """Listening sockets from /proc/net tables, PIDs where the owner is visible."""
    owners = socket_owners(proc_root)
    found = []
    for table, protocol in PROC_NET_TABLES:
        try:
            with (proc_root / "net" / table).open() as lines:
                entries = [entry for entry in parse_proc_net(lines, protocol) if is_listening(entry)]
        except FileNotFoundError:  # e.g. no IPv6 on this machine
            continue
        found += [
            BoundSocket(protocol, e.family, e.local_address, e.local_port, owners.get(e.inode))
            for e in entries
        ]
    return found


def _sort_key(bound: BoundSocket) -> tuple[str, int, str, int]:
    return bound.protocol, bound.port, bound.address, bound.pid or 0


def hidden_owners_note(hidden: int, sees_all: bool, user: str) -> str | None:
    """Why the owners of ``hidden`` sockets are unknown, and what would show them (None if none are);
    ``sees_all``: the agent may read every process's /proc/PID/fd."""
    if not hidden:
        return None
    if sees_all:
        return (
            f"no process visible to the agent holds {hidden} socket(s): they belong to the kernel, "
            "were closed by their process, or belong to processes outside the agent's PID namespace"
        )
    return (
        f"the owning process of {hidden} socket(s) is not visible to user '{user}': owners are found "
        f"in each process's /proc/PID/fd, {other_users_fds_grant()}"
    )


def owners_note(hidden: int) -> str | None:
    """`hidden_owners_note` for this agent: its user and capabilities."""
    return hidden_owners_note(hidden, sees_every_process(effective_capabilities()), agent_user())


def _wanted(bound: BoundSocket, params: ListeningParams) -> bool:
    return params.protocol in ("all", bound.protocol) and params.port in (None, bound.port)


def describe(
    found: Iterable[BoundSocket], source: Literal["psutil", "procfs"], params: ListeningParams | None = None
) -> ListeningSockets:
    """The probe result for ``found`` sockets: de-duplicated, counted, those ``params`` ask for
    sorted and cut to its limit, with process names."""
    params = params or ListeningParams()
    every = set(found)
    matched = sorted((bound for bound in every if _wanted(bound, params)), key=_sort_key)
    unique = matched[: params.limit]
    labels = process_labels({bound.pid for bound in unique if bound.pid is not None})
    hidden = sum(1 for bound in unique if bound.pid is None)
    return ListeningSockets(
        tcp_listeners=sum(1 for bound in every if bound.protocol == "tcp"),
        udp_listeners=sum(1 for bound in every if bound.protocol == "udp"),
        matched=len(matched),
        truncated=len(matched) > len(unique),
        sockets=[
            ListeningSocket(
                protocol=b.protocol,
                family=b.family,
                address=b.address,
                port=b.port,
                pid=b.pid,
                process_name=labels[b.pid].name if b.pid is not None else None,
            )
            for b in unique
        ],
        source=source,
        processes_visible=hidden == 0,
        note=owners_note(hidden),
    )


def _read_listening(params: ListeningParams) -> ListeningSockets:
    try:
        return describe(listening_from_psutil(), "psutil", params)
    except psutil.AccessDenied:
        return describe(listening_from_procfs(), "procfs", params)


@PACK.probe(
    "system.network.listening",
    """Sockets waiting for connections: listening TCP and bound UDP sockets, each with
    protocol, family, local address, port, and the PID and name of the owning process where
    this agent may see it (`processes_visible` is false when some listed owners are hidden;
    `note` then says why and what would show them). Sorted by protocol (TCP first), then port;
    `protocol` (tcp or udp) and `port` keep only those, and at most `limit` are listed (200 by
    default, up to 1000): `tcp_listeners` and `udp_listeners` count every one on the machine,
    `matched` those asked for, and `truncated` is true when some of those were left out. Use it
    to find which service holds a port, or whether a service is listening at all.""",
    timeout_s=15,
)
async def network_listening(ctx: ProbeContext, params: ListeningParams) -> ListeningSockets:
    return await ctx.in_thread(_read_listening, params)

"""Helpers for packs that talk to a local service (postgres, mysql, redis).

Connection details come from three places, first one wins: the probe's params
(host, port, user, database: bounded and patterned), the agent config
(``packs: {postgres: {host: ..., password: ...}}``), then the pack's defaults.
A password is only ever read from the agent config, never from probe params,
so it cannot travel through the hub or appear in an audit log. It is only ever
sent to the host, port and user the agent config names (or the defaults it
leaves): a probe that names another host, port or user connects without it, so
a caller cannot have the agent hand the password to a server of its choosing.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import math
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import trio
from pydantic import AfterValidator, Field

from sonde.packs.base import Detection, Params
from sonde.protocol.names import worded

DETECT_CONNECT_TIMEOUT_S = 0.3
CONNECT_TIMEOUT_S = 5
SERVER_GOODBYE_S = 1.0  # at most, for a server to close its side once the client said goodbye
MIN_DRIVER_TIMEOUT_S = 0.1  # a driver timeout is never 0 (that means "none" to some drivers)

# a name or IPv4 address, an IPv6 literal (bare or in brackets; `_ipv6_literal` checks it), or a socket path
HOST_PATTERN = worded(
    r"^([A-Za-z0-9][A-Za-z0-9.-]{0,252}"
    r"|[0-9A-Fa-f.]{0,39}:[0-9A-Fa-f.:]{1,45}"
    r"|\[[0-9A-Fa-f.]{0,39}:[0-9A-Fa-f.:]{1,45}\]"
    r"|/[A-Za-z0-9._/-]{1,200})$",
    "a host name or IPv4 address (letters, digits, '.' and '-'), an IPv6 address (\"::1\" or \"[::1]\"), "
    "or an absolute path of letters, digits, '.', '_', '/' and '-'",
)


def _ipv6_literal(host: str) -> str:
    """``host`` unchanged; a ValueError when it has the shape of an IPv6 literal but is not one."""
    if ":" in host:
        ipaddress.IPv6Address(unbracketed(host))  # its ValueError says what is wrong
    return host


def unbracketed(host: str) -> str:
    """``host`` without the brackets of "[::1]": drivers and getaddrinfo take "::1"."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


ServiceHost = Annotated[
    str,
    Field(
        pattern=HOST_PATTERN,
        strict=True,
        description='Host name, IPv4 or IPv6 address ("::1" or "[::1]"), or (postgres, mysql) the '
        "directory or path of a unix socket. The agent config's password is sent only to the host, "
        "port and user the agent config names.",
    ),
    AfterValidator(_ipv6_literal),
]
ServicePort = Annotated[int, Field(ge=1, le=65535, strict=True, description="TCP port.")]
ServiceUser = Annotated[
    str,
    Field(
        pattern=worded(
            r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,62}$",
            "1 to 63 letters, digits, '_', '.', '@' or '-', not first '.', '@' or '-'",
        ),
        strict=True,
        description="User to log in as.",
    ),
]
DatabaseName = Annotated[
    str,
    Field(
        pattern=worded(
            r"^[A-Za-z0-9_][A-Za-z0-9_$.-]{0,62}$",
            "1 to 63 letters, digits, '_', '$', '.' or '-', not first '$', '.' or '-'",
        ),
        strict=True,
        description="Database name.",
    ),
]


class ServiceParams(Params):
    """Where the service is; every field falls back to the agent config, then the default."""

    host: ServiceHost | None = None
    port: ServicePort | None = None
    user: ServiceUser | None = None


@dataclass(frozen=True)
class ServiceDefaults:
    """Where a pack's service is when neither the probe's params nor the agent config say."""

    host: str
    port: int
    user: str | None = None
    database: str | None = None


PASSWORD_WITHHELD = (
    "the agent config's password was not sent: it goes only to the host, port and user the agent "
    "config names (or their defaults), and this probe named another"
)


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str | None
    password: str | None
    database: str | None
    password_withheld: bool = False  # the config has one, but this is not the endpoint it names

    def where(self) -> str:
        """The socket path, or host:port ("[::1]:6379" for an IPv6 address)."""
        if self.host.startswith("/"):
            return self.host
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def login_note(self) -> str:
        """What to add to a refused login: why no password was sent, when it was withheld."""
        return f"; {PASSWORD_WITHHELD}" if self.password_withheld else ""


def endpoint(
    params: ServiceParams, config: Mapping[str, Any], defaults: ServiceDefaults, database: str | None = None
) -> Endpoint:
    """The endpoint for ``params``, completed from the pack's agent ``config``, then ``defaults``."""

    def configured(name: str) -> Any:
        return config.get(name, getattr(defaults, name))

    def pick(name: str, given: Any) -> Any:
        return given if given is not None else configured(name)

    host, port, user = (
        unbracketed(str(pick("host", params.host))),
        int(pick("port", params.port)),
        pick("user", params.user),
    )
    password = config.get("password")
    named_host = unbracketed(str(configured("host")))
    named = (host, str(port), user) == (named_host, str(configured("port")), configured("user"))
    return Endpoint(
        host=host,
        port=port,
        user=user,
        password=password if named else None,
        database=pick("database", database),
        password_withheld=password is not None and not named,
    )


def driver_installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def port_answers(host: str, port: int, timeout_s: float = DETECT_CONNECT_TIMEOUT_S) -> bool:
    """True when a TCP connect to ``host:port`` succeeds within ``timeout_s`` (for detection only)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def detect_service(
    name: str, module: str, package: str, sockets: tuple[str, ...], defaults: ServiceDefaults
) -> Detection:
    """Detected when the driver is importable and a unix socket exists or the port answers."""
    if not driver_installed(module):
        return Detection(False, f"the {package} driver is missing: install sonde[databases]")
    for path in sockets:
        if os.path.exists(path):
            return Detection(True, f"{name} socket at {path}")
    if port_answers(defaults.host, defaults.port):
        return Detection(True, f"{name} answers on {defaults.host}:{defaults.port}")
    return Detection(
        False,
        f"no {name} here: no socket ({', '.join(sockets)}) and nothing on {defaults.host}:{defaults.port}",
    )


def time_left_s(ceiling_s: float) -> float:
    """Seconds until the calling task's deadline (its probe's), at most ``ceiling_s``: for a driver's timeout.

    Call it in the probe's task, before handing work to a thread.
    """
    left = trio.current_effective_deadline() - trio.current_time()
    return max(MIN_DRIVER_TIMEOUT_S, min(ceiling_s, left))


@dataclass(frozen=True)
class SocketLimits:
    """A client's socket timeouts, from its probe's deadline when it connects."""

    connect_timeout_s: float
    io_timeout_s: float  # per read or write: a server trickling bytes is stopped by the `Hangup`

    @classmethod
    def from_deadline(cls, io_ceiling_s: float) -> SocketLimits:
        """Call in the probe's task."""
        return cls(time_left_s(CONNECT_TIMEOUT_S), time_left_s(io_ceiling_s))


def whole_seconds_left(ceiling_s: int) -> int:
    """`time_left_s` rounded up to whole seconds (libpq's ``connect_timeout``)."""
    return math.ceil(time_left_s(ceiling_s))


class Hangup:
    """Lets the probe's task cut the socket a worker thread's database client is blocked on.

    The thread `attach`-es its client's socket once connected; the task calls
    `cut` when the probe is done with it (finished, failed or cancelled): the
    socket is shut down, so a call blocked on it fails at once. A cut before the
    attach cuts at the attach. The hangup keeps its own duplicate of the socket's
    descriptor until the cut, so a client that closes its own meanwhile never
    makes the cut hit another file that reused the number.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._cut = False

    @property
    def is_cut(self) -> bool:
        return self._cut

    def attach(self, fileno: int) -> None:
        """(Thread side.) The client's socket is ``fileno`` (from now on: a client reconnecting attaches again)."""
        duplicate: socket.socket | None = socket.socket(fileno=os.dup(fileno))
        earlier = None
        with self._lock:
            if not self._cut:
                earlier, self._socket, duplicate = self._socket, duplicate, None
        if earlier is not None:
            earlier.close()  # the client is done with that one
        if duplicate is not None:
            _shut(duplicate)

    async def hang_up(self, wait_s: float = SERVER_GOODBYE_S) -> None:
        """`cut`, once the server has closed its side of the socket (at most ``wait_s`` later).

        Call it when the client has said goodbye (PostgreSQL's Terminate, MySQL's COM_QUIT) and
        closed its own descriptor. The server closes its side when it has let the connection go:
        a PostgreSQL backend exits first, and until then it holds one of the server's connection
        slots (and its row in pg_stat_activity). Waiting for that before a probe ends lets the
        probe's turn at the server (`sonde.packs.server_turns`) pass on only once the slot is
        free again. Cancelled, it cuts at once.
        """
        with self._lock:
            attached = None if self._cut else self._socket
        try:
            if attached is not None:
                with trio.move_on_after(wait_s):
                    await trio.lowlevel.wait_readable(attached)  # the server's end of file
        finally:
            self.cut()

    def cut(self) -> None:
        """Shut the attached socket down (now or at its attach); idempotent, never blocks."""
        with self._lock:
            self._cut = True
            attached, self._socket = self._socket, None
        if attached is not None:
            _shut(attached)


def _shut(duplicate: socket.socket) -> None:
    with duplicate:
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected (any more): nothing is blocked on it


def nothing_listens(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it came from, says nothing accepts a connection where the
    server should be: refused on its port, or no socket file at its path."""
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain of causes; never a loop
        if seen is None:
            return False
        if isinstance(seen, ConnectionRefusedError | FileNotFoundError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False

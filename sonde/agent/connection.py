"""The agent's WebSocket to the hub: URL, connect, keepalive, error words.

`connect_websocket` owns the TCP (or TLS) stream itself and closes it on
every way out, then runs trio-websocket's client handshake over it; errors
raised in its body come out unwrapped, as they went in.
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import trio
import trio_websocket

from sonde.connect_failures import describe_connect_error, describe_tls_failure
from sonde.protocol.messages import MAX_FRAME_BYTES
from sonde.transport import CLOSE_GOING_AWAY, LinkClosed, Transport, WebSocketTransport, describe_close

log = logging.getLogger(__name__)

WS_PATH = "/ws/agent"
CONNECT_TIMEOUT_S = 10.0  # TCP + TLS, then again for the WebSocket handshake
DISCONNECT_TIMEOUT_S = 5.0
KEEPALIVE_INTERVAL_S = 30.0  # longest gap between websocket pings; no pong within it: the hub is dead

Connector = Callable[[str], AbstractAsyncContextManager[Transport]]
TRANSPORT_ERRORS = (
    trio_websocket.HandshakeError,
    trio_websocket.ConnectionClosed,
    trio.BrokenResourceError,
    OSError,
    LinkClosed,
)


def websocket_url(hub_url: str) -> str:
    """The agent endpoint for ``hub_url``: http -> ws, https -> wss, path + ``/ws/agent``."""
    parts = urlsplit(hub_url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme)
    if scheme is None:
        raise ValueError(f"hub URL {hub_url!r} must start with http:// or https://")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))


@asynccontextmanager
async def connect_websocket(url: str) -> AsyncIterator[Transport]:
    """Open the WebSocket to the hub (TLS for wss, 1 MiB frames); yields the transport.

    Raises `OSError` or a `trio_websocket.HandshakeError` (timeout, refusal)
    when no WebSocket could be opened. The TCP stream is opened here and
    closed on every way out: trio-websocket's own client leaves it to the
    garbage collector when the hub refuses the handshake or closes first.
    Errors from the body come out unwrapped, as they went in.
    """
    parts = urlsplit(url)
    host, tls = parts.hostname or "", parts.scheme == "wss"
    port = parts.port or (443 if tls else 80)
    with trio.move_on_after(CONNECT_TIMEOUT_S) as connecting:
        stream = await open_stream(host, port, tls)
    if connecting.cancelled_caught:
        raise trio_websocket.ConnectionTimeout
    async with stream:
        try:
            async with trio.open_nursery() as nursery:
                ws = await open_handshake(nursery, stream, parts.netloc.rpartition("@")[2], parts.path)
                try:
                    yield WebSocketTransport(ws)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(DISCONNECT_TIMEOUT_S):
                        await ws.aclose()
                    nursery.cancel_scope.cancel()  # trio-websocket's reader task
        except BaseExceptionGroup as group:
            raise sole_error(group) from None


async def open_stream(
    host: str, port: int, tls: bool
) -> trio.SocketStream | trio.SSLStream[trio.SocketStream]:
    """A TCP stream to ``host:port``, wrapped in TLS (certificates checked) when ``tls``."""
    if tls:
        context = ssl.create_default_context()
        stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context, https_compatible=True)
        try:  # here, not inside the WebSocket handshake, which would wait out its timeout instead
            await stream.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream
    return await trio.open_tcp_stream(host, port)


async def open_handshake(
    nursery: trio.Nursery, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream], host: str, path: str
) -> trio_websocket.WebSocketConnection:
    """The client handshake over ``stream``; its reader task runs in ``nursery``."""
    with trio.move_on_after(CONNECT_TIMEOUT_S) as handshaking:
        return await trio_websocket.wrap_client_stream(
            nursery, stream, host, path, max_message_size=MAX_FRAME_BYTES
        )
    assert handshaking.cancelled_caught
    raise trio_websocket.ConnectionTimeout


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception in ``group`` that is not `trio.Cancelled`, else ``group`` itself."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        error = pending.pop()
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        elif not isinstance(error, trio.Cancelled):
            leaves.append(error)
    return leaves[0] if len(leaves) == 1 else group


async def keep_alive(
    ws: trio_websocket.WebSocketConnection,
    heartbeat_sent: Callable[[], Awaitable[None]],
    interval_s: float = KEEPALIVE_INTERVAL_S,
    heard_at: Callable[[], float] = lambda: -math.inf,
) -> bool:
    """Ping the hub right after each heartbeat (at least every ``interval_s``); no pong within that: close.

    The pong is the only hub->agent traffic of an idle agent: it tells a dead
    or hung hub apart from a quiet one, and keeps a reverse proxy's read
    timeout (nginx: 60 s) from closing the socket. Sent on the heels of the
    heartbeat, the ping often reaches the hub in the same wakeup. In one
    back-to-back measurement with 10,000 agents the hub's idle CPU was 13.5 %
    of a core with an independent 30 s ping, 10.9 % with the ping aligned to
    the heartbeat and 8.5 % with no ping (this machine kind is noisy: later
    runs of the same code measured 17-20 %).

    Giving up, it closes the WebSocket (`drop_websocket`) within `DISCONNECT_TIMEOUT_S`
    even when the hub reads nothing, so the link ends and the daemon reconnects; it then
    returns True (False: the connection closed otherwise).

    A late pong is no dead hub while its frames are still being taken (``heard_at``, on
    trio's clock, within ``interval_s``): trio-websocket hands messages over one at a time,
    in order, so an agent busy with a burst of heavy probes reads the pong behind every
    request the hub sent before it. It dropped a healthy hub in a review (four times in one
    run), cutting every probe in flight.
    """
    while True:
        with trio.move_on_after(interval_s):
            await heartbeat_sent()
        with trio.move_on_after(interval_s) as waited:
            try:
                await ws.ping()
            except trio_websocket.ConnectionClosed:
                return False
        if waited.cancelled_caught and trio.current_time() - heard_at() < interval_s:
            log.info("the hub's pong is late, but its frames keep coming: this agent is behind, not the hub")
        elif waited.cancelled_caught:
            log.warning("the hub did not answer a ping within %gs; dropping the connection", interval_s)
            await drop_websocket(ws, CLOSE_GOING_AWAY, "keepalive timeout")
            return True


async def drop_websocket(ws: trio_websocket.WebSocketConnection, code: int, reason: str) -> None:
    """Close ``ws`` with ``code`` and ``reason``, waiting `DISCONNECT_TIMEOUT_S` at most.

    A peer that stopped reading never takes the close frame (the socket buffers are full)
    and never answers the close handshake, and trio-websocket's ``aclose`` would wait for
    either forever. Cancelled, it closes the stream under ``ws`` on its way out, and every
    task of the link blocked on it (the writer in a send) wakes with the connection gone.
    """
    with trio.move_on_after(DISCONNECT_TIMEOUT_S):
        await ws.aclose(code, reason)


def describe_transport_error(exc: BaseException) -> str:
    """A short phrase for a transport failure."""
    tls = describe_tls_failure(exc)
    if tls is not None:
        return tls
    if isinstance(exc, trio_websocket.ConnectionRejected):
        return f"the hub refused the WebSocket (HTTP {exc.status_code})"
    if isinstance(exc, trio_websocket.ConnectionTimeout):
        return f"no WebSocket handshake within {CONNECT_TIMEOUT_S:g}s"
    if isinstance(exc, trio_websocket.ConnectionClosed):
        return describe_close(exc.reason)
    return describe_connect_error(exc) or str(exc) or type(exc).__name__

"""Hypercorn's trio TCP server with its half-close taken under its send lock.

hypercorn 0.18 serialises every ``send_all`` on a connection with a lock, but
its ``_close`` calls ``send_eof`` outside that lock, and trio's SocketStream
checkpoints inside ``send_eof`` while holding its send-conflict detector. A
send in that window (the reader answering the peer's close frame, or the app
closing its WebSocket) raises `trio.BusyResourceError`, which hypercorn does
not catch: it ends the connection's task and with it the whole server. A
client that closed its socket at the moment the hub closed it was enough to
stop the hub (found as a rare e2e failure; tests/security/test_attack_close.py
provokes it on purpose).

`use_serialized_close` puts `SerializedCloseTCPServer` where hypercorn's
trio worker looks the class up. It is idempotent.
"""

from __future__ import annotations

import hypercorn.trio.run as hypercorn_trio_run
import trio
from hypercorn.trio.tcp_server import TCPServer

_HALF_CLOSE_ERRORS = (
    trio.BrokenResourceError,
    trio.BusyResourceError,
    trio.ClosedResourceError,
    AttributeError,
)


class SerializedCloseTCPServer(TCPServer):
    """`TCPServer` whose ``send_eof`` never overlaps a ``send_all``."""

    async def _close(self) -> None:
        try:
            self.send_lock.acquire_nowait()
        except trio.WouldBlock:
            # A send is in flight (perhaps stuck on a peer that does not read):
            # no half-close; closing the stream below ends that send too.
            pass
        else:
            try:
                await self.stream.send_eof()
            except _HALF_CLOSE_ERRORS:  # already gone; AttributeError: a TLS stream has no half-close
                pass
            finally:
                self.send_lock.release()
        await self.stream.aclose()


def use_serialized_close() -> None:
    """Make hypercorn's trio worker serve connections with `SerializedCloseTCPServer`."""
    worker_globals = vars(hypercorn_trio_run)
    current = worker_globals.get("TCPServer")
    if not (isinstance(current, type) and issubclass(current, TCPServer)):
        raise RuntimeError("hypercorn.trio.run no longer serves with TCPServer; revisit sonde.hub.tcp_close")
    worker_globals["TCPServer"] = SerializedCloseTCPServer

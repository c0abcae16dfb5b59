"""Hypercorn's trio TCP server, kept from ending the hub over one connection.

In hypercorn 0.18 an exception escaping one connection's handling ends the
whole server, and a client with no credentials can cause two:

- ``_close`` calls ``send_eof`` outside the lock that serialises every
  ``send_all``, and trio's SocketStream checkpoints inside ``send_eof`` while
  holding its send-conflict detector; a send in that window (the reader
  answering the peer's close frame) raises `trio.BusyResourceError`. A client
  that closed its socket as the hub closed it was enough (seen as a rare e2e
  failure).
- a WebSocket upgrade request followed by stray bytes puts h11 in its error
  state, and the 400 that hypercorn then sends raises ``LocalProtocolError``
  (hypercorn issue 225).

`GuardedTCPServer` takes the send lock for the half-close, and contains any
other failure to its own connection: logged, connection closed, server up.
`use_guarded_tcp_server` puts it where hypercorn's trio worker looks the class
up; it is idempotent. tests/security/test_attack_connections.py provokes both.
"""

from __future__ import annotations

import logging

import hypercorn.trio.run as hypercorn_trio_run
import trio
from hypercorn.trio.tcp_server import TCPServer

from sonde.hub.run import innermost

log = logging.getLogger(__name__)

_HALF_CLOSE_ERRORS = (
    trio.BrokenResourceError,
    trio.BusyResourceError,
    trio.ClosedResourceError,
    OSError,
    AttributeError,  # a TLS stream has no half-close
)


class GuardedTCPServer(TCPServer):
    """`TCPServer` whose half-close never overlaps a send, and whose failures stay its own."""

    async def run(self) -> None:
        try:
            await super().run()
        except Exception as exc:  # one connection's failure must not end the server
            cause = innermost(exc)
            log.warning(
                "dropped a connection after an HTTP server error: %s: %.200s", type(cause).__name__, cause
            )
            log.debug("the HTTP server error", exc_info=exc)
            await self.stream.aclose()

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
            except _HALF_CLOSE_ERRORS:
                pass
            finally:
                self.send_lock.release()
        await self.stream.aclose()


def use_guarded_tcp_server() -> None:
    """Make hypercorn's trio worker serve connections with `GuardedTCPServer`."""
    worker_globals = vars(hypercorn_trio_run)
    current = worker_globals.get("TCPServer")
    if not (isinstance(current, type) and issubclass(current, TCPServer)):
        raise RuntimeError("hypercorn.trio.run no longer serves with TCPServer; revisit sonde.hub.tcp_guard")
    worker_globals["TCPServer"] = GuardedTCPServer

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

Its close is shielded from cancellation. Hypercorn closes a connection whose
request was answered before its body was read (a GET with a body, a refusal
from the headers alone) from inside the application's task, and quart-trio
cancels that task as the request ends: cancelled at the half-close, the socket
stayed open, and the client's next request on it was read and never answered
(the same family as hypercorn issue 106: a cancelled trio server skips the
socket shutdown).

It also lets go of a connection as soon as the peer has gone. Hypercorn's
keep-alive timer is a task in the connection's task group, and the group is
only left (and the socket closed) when every task in it has ended, so a
connection the client closed while idle, or before its first request, stayed
open in CLOSE_WAIT for the whole 75 s `keep_alive_timeout`: anyone could hold
the hub's file descriptors by opening and closing connections.

`WAITING` bounds the idle connections one address may hold: before their first
request (a slowloris client held each for 75 s), between requests (a client
that sends one request on each connection and keeps them all open), and agent
sockets before their register (each held 15 s, with up to a frame of memory). A connection
that goes idle past its address's bound is closed once its answer is out. `CONNECTIONS` counts the
connections opened and closed in this process: each leaves cyclic garbage, and
the hub's collector (`sonde.hub.gc_policy`) runs a full collection after
enough have closed.

It drops a peer that stops reading. Hypercorn writes an answer with its send lock held and
shielded from cancellation, with no deadline: a client that sent a request and never read
the answer (one address, thousands of sockets, no key) held a file descriptor, the answer's
memory and, for /mcp, a place among the requests its key and the hub serve at once, until it
chose to go; with the hub's descriptors spent, REST timed out and agents could not connect.
Now each `SEND_CHUNK_BYTES` of a write must be taken within `SEND_STALL_S`, or the
connection is closed (`STALLED` says so, once a minute with a count).

`use_guarded_tcp_server` puts the class where hypercorn's trio worker looks it
up; it is idempotent. tests/security/test_attack_connections.py provokes each
of the above against a real hub.
"""

from __future__ import annotations

import logging
import time

import hypercorn.trio.run as hypercorn_trio_run
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.trio.tcp_server import TCPServer

from sonde.hub.client_keys import client_key
from sonde.hub.run import innermost

log = logging.getLogger(__name__)

_HALF_CLOSE_ERRORS = (
    trio.BrokenResourceError,
    trio.BusyResourceError,
    trio.ClosedResourceError,
    OSError,
    AttributeError,  # a TLS stream has no half-close
)


class ConnectionCount:
    """How many connections are open, and how many have closed, in this process."""

    def __init__(self) -> None:
        self._open = 0
        self._closed = 0

    def opened(self) -> None:
        self._open += 1

    def closed(self) -> None:
        self._open -= 1
        self._closed += 1

    def ended(self) -> None:
        """Other connection state ended that leaves garbage as a closed connection does: an MCP
        session (a client may open and end any number of them over one connection that stays
        open), counted with the closed ones for the garbage collector (`sonde.hub.gc_policy`)."""
        self._closed += 1

    def open_now(self) -> int:
        return self._open

    def closed_total(self) -> int:
        return self._closed


CONNECTIONS = ConnectionCount()  # the garbage collector is per process, and so is this

MAX_WAITING_PER_ADDRESS = 1024  # a NAT'd fleet reconnecting over a slow link stays well under it
WARN_EVERY_S = 60.0


class WaitingConnections:
    """Idle connections from each address (no request yet, or none since the last), at most
    ``limit`` each.

    Hypercorn keeps a connection that sends nothing (or its headers a byte at a
    time), or nothing more after an answer, for its whole 75 s keep-alive timeout;
    without a bound one address could hold every file descriptor the hub has and
    keep the fleet out. A client that connects sends its request at once (agents,
    MCP clients, a reverse proxy), and an agent's WebSocket is a request that lasts
    (counted here only until its register is verified: `sonde.hub.agent_socket`),
    so this only ever binds clients that hold connections open without using them;
    even 10,000 agents behind one NAT address, reconnecting at once over a link
    with 100 ms of latency, have some 500 waiting.
    """

    def __init__(self, limit: int = MAX_WAITING_PER_ADDRESS) -> None:
        self.limit = limit
        self._by_address: dict[str, int] = {}
        self._warned_at: dict[str, float] = {}

    def admit(self, address: str) -> bool:
        address = client_key(address)  # an IPv6 host's whole /64
        waiting = self._by_address.get(address, 0)
        if waiting >= self.limit:
            now = time.monotonic()
            if now - self._warned_at.get(address, -WARN_EVERY_S) >= WARN_EVERY_S:
                self._warned_at[address] = now
                log.warning(
                    "refusing connections from %s: %d of its connections are idle (no request yet, none "
                    "since the last, or an agent socket with no register yet); more are refused, and those "
                    "going idle closed, until some are used",
                    address,
                    waiting,
                )
            return False
        self._by_address[address] = waiting + 1
        return True

    def started(self, address: str) -> None:
        """An idle connection from ``address`` began a request, or ended."""
        address = client_key(address)
        waiting = self._by_address[address] - 1
        if waiting:
            self._by_address[address] = waiting
        else:
            del self._by_address[address]
            self._warned_at.pop(address, None)

    def waiting(self, address: str) -> int:
        return self._by_address.get(client_key(address), 0)


WAITING = WaitingConnections()

# To take each chunk below. Not 30 s: a client reading a large answer steadily at 4 KiB/s over
# loopback was cut at 30 s (its window reopens a 32-64 KiB segment at a time, and TCP backs off
# its probes of a closed window); 120 s is as long as TCP itself backs off.
SEND_STALL_S = 120.0
SEND_CHUNK_BYTES = 64 * 1024


class StalledPeers:
    """Connections dropped for taking no bytes: counted, and said at most once a minute."""

    def __init__(self) -> None:
        self.dropped = 0
        self._said = 0
        self._said_at = -WARN_EVERY_S

    def note(self, address: str | None) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._said_at >= WARN_EVERY_S:
            log.warning(
                "dropped %d connection(s) whose peer took none of the next %d KiB of an answer within "
                "%.0f s (the last from %s): a client that does not read what it asked for is not kept",
                self.dropped - self._said,
                SEND_CHUNK_BYTES // 1024,
                SEND_STALL_S,
                address or "an address already gone",
            )
            self._said, self._said_at = self.dropped, now


STALLED = StalledPeers()


class GuardedTCPServer(TCPServer):
    """`TCPServer` whose half-close never overlaps a send, whose failures stay its own, which
    waits for no keep-alive once the peer has gone, and which keeps an address to `WAITING`."""

    peer_gone = False
    address: str | None = None
    waiting_from: str | None = None  # the address while the connection is idle and counted
    close_when_idle = False  # idle past its address's bound: no keep-alive

    _reading: trio.CancelScope | None = None

    async def _read_data(self) -> None:
        with trio.CancelScope() as self._reading:
            await super()._read_data()
        self.peer_gone = True  # end of stream, reset, or closed by us: nothing more will arrive
        await self.idle_task.stop()

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            await self._send_data(event.data)
            return
        if isinstance(event, Updated):
            if not event.idle:
                self._request_started()
            elif self.peer_gone:
                return  # a request finished after the peer left: no keep-alive to wait out
            else:
                self._went_idle()
            with trio.CancelScope(shield=True):  # the keep-alive timer must start: see _close
                await super().protocol_send(event)
            return
        await super().protocol_send(event)
        if isinstance(event, Closed):
            # Closed by this side (the hub stopping): nothing more is read. A pipelined request in
            # hand held the reader (hypercorn recycles no request cycle once stopping), and the
            # connection's task, until the 5 s grace of the hub's stop ran out (a fault review).
            self._stop_reading()

    async def _send_data(self, data: bytes) -> None:
        """Hypercorn's write (under the send lock, shielded: a cancelled write would leave half a
        frame), but each `SEND_CHUNK_BYTES` must be taken within `SEND_STALL_S`."""
        async with self.send_lock:
            gone = False
            try:
                with trio.CancelScope(shield=True):
                    view = memoryview(data)
                    for start in range(0, len(view), SEND_CHUNK_BYTES):
                        with trio.move_on_after(SEND_STALL_S) as deadline:
                            await self.stream.send_all(view[start : start + SEND_CHUNK_BYTES])
                        if deadline.cancelled_caught:
                            gone = True
                            STALLED.note(self.address)
                            await self.stream.aclose()  # half a chunk may be out: nothing more can be
                            break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                gone = True
            if gone:
                await self.protocol.handle(Closed())
                self._stop_reading()

    def _stop_reading(self) -> None:
        """End the reader of a connection that can no longer be written to. With a pipelined
        request in hand, hypercorn's HTTP/1.1 reader waits for the answer before it reads on, and
        that answer can never be sent now: the connection (its socket, its task) was held for good,
        by any client that pipelined requests with large answers and went away."""
        if self._reading is not None:
            self._reading.cancel()

    def _request_started(self) -> None:
        if self.waiting_from is not None:
            WAITING.started(self.waiting_from)
            self.waiting_from = None

    def _went_idle(self) -> None:
        if self.waiting_from is not None or self.address is None:
            return
        if WAITING.admit(self.address):
            self.waiting_from = self.address
        else:
            self.close_when_idle = True

    async def _idle_timeout(self) -> None:
        if not self.close_when_idle:
            await super()._idle_timeout()
            return
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()

    async def run(self) -> None:
        address = peer_address(self.stream)
        if address is None or not WAITING.admit(address):
            await self.stream.aclose()
            return
        self.address = self.waiting_from = address
        CONNECTIONS.opened()
        try:
            await super().run()
        except Exception as exc:  # one connection's failure must not end the server
            cause = innermost(exc)
            log.warning(
                "dropped a connection after an HTTP server error: %s: %.200s", type(cause).__name__, cause
            )
            log.debug("the HTTP server error", exc_info=exc)
            await self.stream.aclose()
        finally:
            self._request_started()
            CONNECTIONS.closed()

    async def _close(self) -> None:
        # Shielded: this runs in the application's task when a response ends, and
        # quart-trio cancels that task as the request is closed; cancelled at the
        # half-close, the socket stayed open with nobody to answer on it.
        with trio.CancelScope(shield=True):
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


def peer_address(stream: trio.abc.Stream) -> str | None:
    """The client's IP address (None if it has gone already)."""
    sock = getattr(stream, "socket", None) or getattr(
        getattr(stream, "transport_stream", None), "socket", None
    )
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return None
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


def use_guarded_tcp_server() -> None:
    """Make hypercorn's trio worker serve connections with `GuardedTCPServer`."""
    worker_globals = vars(hypercorn_trio_run)
    current = worker_globals.get("TCPServer")
    if not (isinstance(current, type) and issubclass(current, TCPServer)):
        raise RuntimeError("hypercorn.trio.run no longer serves with TCPServer; revisit sonde.hub.tcp_guard")
    worker_globals["TCPServer"] = GuardedTCPServer

"""The nursery-based link shared by hub and agent: one per connection.

A link owns one connection and three kinds of task in its own nursery: a
reader that decodes frames and dispatches them by type, a single writer fed
by a bounded channel, and (on the agent) a heartbeat. `Link.request` sends a
probe request and waits on a one-shot channel that the reader fills when the
matching ``requestId`` comes back. When the connection dies the nursery is
cancelled, every pending request fails at once with `AgentUnavailable`, and
the owner's ``async with open_link(...)`` body ends with it.

Liveness: with ``liveness_timeout_s`` set, a peer that sends nothing for that
long is treated as dead (the hub sets it to two heartbeat intervals). Only a
frame that was taken counts: one that fails its checks keeps nothing alive.

Refused frames: a frame that fails its authentication (MAC, signature, replay)
or its timestamp window ends the link at once (close code 1008, the reason
naming the clocks for a timestamp): nothing legitimate sends one on an ordered,
authenticated connection, and a link that keeps going past it would stay "up"
while every probe times out. A stale but authentic ``probe.request`` is first
answered with ``probe.error`` (``clock_skew``) so its caller hears why, which
also shows the peer the same skew. A frame that does not even parse (a version
mismatch of one message kind) is dropped, counted and logged; the link goes on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NoReturn

import trio

from sonde.frame_budget import FrameBudget
from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import AgentUnavailable, ProbeFailed, ProtocolError, SignatureError
from sonde.protocol.messages import (
    Envelope,
    Message,
    ProbeCancel,
    ProbeCancelPayload,
    ProbeError,
    ProbeErrorPayload,
    ProbeRequest,
    ProbeResponse,
)
from sonde.protocol.signing import StaleFrame
from sonde.transport import CLOSE_NORMAL, CLOSE_POLICY, LinkClosed, Transport

log = logging.getLogger(__name__)

SEND_BUFFER_FRAMES = 32
CANCEL_SEND_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 1.0
# a link's first dropped frames are logged each, then at most one line this often: a peer
# sending thousands of authentic but unreadable frames wrote a warning each (1.2 MB in 0.3 s)
DROPPED_LOGGED_EACH = 10
DROPPED_LOG_INTERVAL_S = 60.0


class FrameRefused(LinkClosed):
    """The peer sent a frame that failed its checks: the link ends with a policy-violation close."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, CLOSE_POLICY)


@dataclass(frozen=True)
class LinkStatistics:
    in_flight: int
    sent: int
    received: int
    late: int
    dropped: int


MessageHandler = Callable[[Message], Awaitable[None]]
HeartbeatFactory = Callable[[], Envelope]
Outgoing = str | trio.Event  # a frame for the writer, or an event it sets once every frame before is sent


class Link:
    """One live connection. Create it with `open_link`, never directly."""

    def __init__(
        self,
        transport: Transport,
        codec: FrameCodec,
        on_message: MessageHandler,
        send_channel: trio.MemorySendChannel[Outgoing],
        peer: str = "the peer",
    ) -> None:
        self.transport = transport
        self.codec = codec
        self.peer = peer  # for log lines: "agent web-1 (id)" at the hub, "the hub" at the agent
        self._on_message = on_message
        self._send_channel = send_channel
        self._pending: dict[str, trio.MemorySendChannel[Message | None]] = {}
        self._closed = trio.Event()
        self.close_reason = ""
        self.close_code = CLOSE_NORMAL
        self.peer_close_code: int | None = None  # the code of the peer's close frame, when it sent one
        self._sent = 0
        self._received = 0
        self._budget = FrameBudget(trio.current_time())  # frames thrown away, and the most it takes
        self._drop_logged_at: float | None = None
        self._drops_unlogged = 0
        self._last_received = trio.current_time()
        self._heartbeat_sent = trio.Event()

    # --- public ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def refused_frame(self) -> bool:
        """True when the link ended because a frame failed its checks (on this side or the peer's)."""
        return self.close_code == CLOSE_POLICY

    def close(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        """End the link, telling the peer ``reason`` and ``code`` (the WebSocket close frame carries them)."""
        self._mark_closed(reason, code)

    def statistics(self) -> LinkStatistics:
        budget = self._budget
        return LinkStatistics(len(self._pending), self._sent, self._received, budget.late, budget.dropped)

    async def send(self, message: Envelope) -> None:
        """Queue one message for the writer; raises `AgentUnavailable` once closed."""
        if self.closed:
            raise AgentUnavailable(f"agent disconnected: {self.close_reason}")
        text = self.codec.encode(message)
        try:
            await self._send_channel.send(text)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise AgentUnavailable(f"agent disconnected: {self.close_reason}") from None

    async def request(self, message: ProbeRequest) -> ProbeResponse:
        """Send a probe request and wait for its response.

        Raises `ProbeFailed` when the peer answers with ``probe.error`` and
        `AgentUnavailable` when the connection dies first. Leaving early (a
        timeout or cancellation at the caller) sends one ``probe.cancel``.
        """
        request_id = message.payload.request_id
        if request_id in self._pending:
            raise ValueError(f"request id {request_id!r} is already in flight")
        if self.closed:
            raise AgentUnavailable(f"agent disconnected: {self.close_reason}")
        reply_send, reply_receive = trio.open_memory_channel[Message | None](1)
        self._pending[request_id] = reply_send
        answered = False
        try:
            await self.send(message)
            reply = await reply_receive.receive()
            answered = True
        finally:
            self._pending.pop(request_id, None)
            if not answered:
                self._budget.give_up()
                if not self.closed:
                    await self._send_cancel(request_id)
        return self._unwrap(reply)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def heard_at(self) -> float:
        """When (trio's clock) the peer's last frame was taken."""
        return self._last_received

    async def heartbeat_sent(self) -> None:
        """Wait until the next heartbeat is queued (a keepalive ping can ride the same wakeup)."""
        await self._heartbeat_sent.wait()

    # --- internals -------------------------------------------------------

    def _unwrap(self, reply: Message | None) -> ProbeResponse:
        if reply is None:
            raise AgentUnavailable(f"agent disconnected: {self.close_reason}")
        if isinstance(reply, ProbeError):
            raise ProbeFailed(reply.payload.code, reply.payload.message)
        assert isinstance(reply, ProbeResponse)
        return reply

    async def _send_cancel(self, request_id: str) -> None:
        cancel = ProbeCancel(payload=ProbeCancelPayload(request_id=request_id))
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_SEND_TIMEOUT_S):
            try:
                await self.send(cancel)
            except AgentUnavailable:
                pass

    def _route_reply(self, message: ProbeResponse | ProbeError) -> None:
        waiter = self._pending.pop(message.payload.request_id, None)
        if waiter is None:
            refusal = self._budget.late_reply()
            if refusal is not None:
                raise FrameRefused(refusal)
            return
        waiter.send_nowait(message)

    def _mark_closed(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        if self.closed:
            return
        self.close_reason = reason
        self.close_code = code
        self._closed.set()
        for waiter in self._pending.values():
            waiter.send_nowait(None)
        self._pending.clear()

    async def _read_loop(self) -> None:
        while True:
            text = await self.transport.receive_text()
            self._received += 1
            if await self._dispatch(text):
                self._last_received = trio.current_time()  # only a frame taken shows the peer alive

    async def _watch_liveness(self, timeout_s: float) -> None:
        """End the link when the peer sends nothing for ``timeout_s``.

        It wakes once per ``timeout_s`` or so, not per frame: moving a cancel
        scope's deadline on every frame costs the scheduler a heap entry each time.
        """
        while True:
            await trio.sleep_until(self._last_received + timeout_s)
            if trio.current_time() >= self._last_received + timeout_s:
                raise LinkClosed(f"peer silent for {timeout_s:g}s")

    async def _dispatch(self, text: str) -> bool:
        """Decode and route one frame; False when it was dropped. Raises `FrameRefused`."""
        try:
            message = self.codec.decode(text)
        except SignatureError as exc:
            self._budget.dropped += 1
            await self._refuse(exc)
        except ProtocolError as exc:
            refusal = self._budget.drop(trio.current_time())
            if refusal is not None:
                raise FrameRefused(refusal) from None
            self._log_dropped(exc.message)
            return False
        if isinstance(message, ProbeResponse | ProbeError):
            self._route_reply(message)
        else:
            await self._on_message(message)
        return True

    def _log_dropped(self, why: str) -> None:
        """Log a dropped frame: each of a link's first `DROPPED_LOGGED_EACH`, then one line per
        `DROPPED_LOG_INTERVAL_S` at most, counting those left out."""
        now = trio.current_time()
        last = self._drop_logged_at
        if (
            self._budget.dropped > DROPPED_LOGGED_EACH
            and last is not None
            and now - last < DROPPED_LOG_INTERVAL_S
        ):
            self._drops_unlogged += 1
            return
        more = f" ({self._drops_unlogged} more dropped since the last line)" if self._drops_unlogged else ""
        log.warning("dropped a frame from %s: %s%s", self.peer, why, more)
        self._drop_logged_at, self._drops_unlogged = now, 0

    async def _refuse(self, exc: SignatureError) -> NoReturn:
        """End the link over a frame that failed its checks, answering it first if it was a
        stale probe request (authentic: the MAC was checked before the timestamp)."""
        if isinstance(exc, StaleFrame):
            reason = exc.message
            if isinstance(exc.frame, ProbeRequest):
                payload = ProbeErrorPayload(
                    request_id=exc.frame.payload.request_id, code="clock_skew", message=reason
                )
                with trio.move_on_after(CANCEL_SEND_TIMEOUT_S):
                    await self.send(ProbeError(payload=payload))
                    await self._flushed()
        else:
            reason = f"refused a frame from the {self.codec.peer or 'peer'}: {exc.message}"
        raise FrameRefused(reason)

    async def _flushed(self) -> None:
        """Wait until the writer has sent every frame queued so far."""
        done = trio.Event()
        try:
            await self._send_channel.send(done)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return
        await done.wait()

    async def _write_loop(self, receive_channel: trio.MemoryReceiveChannel[Outgoing]) -> None:
        async with receive_channel:
            async for item in receive_channel:
                if isinstance(item, trio.Event):
                    item.set()
                    continue
                await self.transport.send_text(item)
                self._sent += 1

    async def _heartbeat_loop(self, interval_s: float, make_heartbeat: HeartbeatFactory) -> None:
        """A heartbeat at once, then one every ``interval_s``.

        The first goes right after the link opens (at the agent: after the hub's ack) for
        the hub's memory: its server (hypercorn) keeps a connection's last read, up to
        64 KiB, until the next one, and that last read is the register, some 55 KB with
        the packs described. Held until a first heartbeat an interval later, those reads
        were 270 MB of a hub's heap with 5,000 agents connected (benchmarks, scale).
        """
        start = trio.current_time()
        beat = 0
        while True:
            await trio.sleep_until(start + beat * interval_s)
            beat += 1
            await self.send(make_heartbeat())
            self._heartbeat_sent.set()
            self._heartbeat_sent = trio.Event()

    async def _supervise(self, name: str, job: Callable[[], Awaitable[None]]) -> None:
        """Run one link task; whatever ends it ends the whole link."""
        reason = "closed by owner"  # kept when the task is cancelled from outside
        code = CLOSE_NORMAL
        try:
            await job()
            reason = f"{name} ended"
        except LinkClosed as exc:  # a peer's 1008 too: it refused one of our frames
            reason = str(exc) or "connection closed"
            code = CLOSE_POLICY if exc.code == CLOSE_POLICY else CLOSE_NORMAL
            if self.peer_close_code is None:
                self.peer_close_code = exc.code
        except AgentUnavailable:
            reason = self.close_reason or "connection closed"
        finally:
            self._mark_closed(reason, code)


@asynccontextmanager
async def open_link(
    transport: Transport,
    codec: FrameCodec,
    on_message: MessageHandler,
    *,
    heartbeat_interval_s: float | None = None,
    make_heartbeat: HeartbeatFactory | None = None,
    liveness_timeout_s: float | None = None,
    peer: str = "the peer",
) -> AsyncIterator[Link]:
    """Run a link over ``transport`` for the duration of the block.

    The block is cancelled when the connection dies; afterwards every pending
    request has failed with `AgentUnavailable`. Leaving the block closes the
    connection with a normal close code (1008 after a refused frame). ``peer``
    names the other side in log lines.
    """
    send_channel, receive_channel = trio.open_memory_channel[Outgoing](SEND_BUFFER_FRAMES)
    link = Link(transport, codec, on_message, send_channel, peer)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link._supervise, "reader", link._read_loop)
            if liveness_timeout_s is not None:
                nursery.start_soon(
                    link._supervise, "liveness", lambda: link._watch_liveness(liveness_timeout_s)
                )
            nursery.start_soon(link._supervise, "writer", lambda: link._write_loop(receive_channel))
            if heartbeat_interval_s is not None and make_heartbeat is not None:
                nursery.start_soon(
                    link._supervise,
                    "heartbeat",
                    lambda: link._heartbeat_loop(heartbeat_interval_s, make_heartbeat),
                )
            nursery.start_soon(_cancel_when_closed, link, nursery.cancel_scope)
            try:
                yield link
            finally:
                link._mark_closed(link.close_reason or "closed by owner")
                nursery.cancel_scope.cancel()
    finally:
        send_channel.close()
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            try:
                await transport.close(link.close_code, link.close_reason)
            except LinkClosed:
                pass


async def _cancel_when_closed(link: Link, scope: trio.CancelScope) -> None:
    await link.wait_closed()
    scope.cancel()

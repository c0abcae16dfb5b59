"""The nursery-based link shared by hub and agent: one per connection.

A link owns one connection and three kinds of task in its own nursery: a
reader that decodes frames and dispatches them by type, a single writer fed
by a bounded channel, and (on the agent) a heartbeat. `Link.request` sends a
probe request and waits on a one-shot channel that the reader fills when the
matching ``requestId`` comes back. When the connection dies the nursery is
cancelled, every pending request fails at once with `AgentUnavailable`, and
the owner's ``async with open_link(...)`` body ends with it.

Liveness: with ``liveness_timeout_s`` set, a peer that sends nothing for that
long is treated as dead (the hub sets it to two heartbeat intervals).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

import trio
import trio_websocket

from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import AgentUnavailable, ProbeFailed, ProtocolError
from sonde.protocol.messages import (
    Envelope,
    Message,
    ProbeCancel,
    ProbeCancelPayload,
    ProbeError,
    ProbeRequest,
    ProbeResponse,
)

log = logging.getLogger(__name__)

SEND_BUFFER_FRAMES = 32
CANCEL_SEND_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 1.0
CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008


class LinkClosed(Exception):
    """The transport under a link is gone."""


class Transport(Protocol):
    """A message-oriented connection carrying text frames."""

    async def send_text(self, text: str) -> None: ...

    async def receive_text(self) -> str:
        """Next text frame; raises `LinkClosed` once the connection is gone."""
        ...

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None: ...


class WebSocketTransport:
    """`Transport` over a trio-websocket connection (client or server side)."""

    def __init__(self, ws: trio_websocket.WebSocketConnection) -> None:
        self.ws = ws

    async def send_text(self, text: str) -> None:
        try:
            await self.ws.send_message(text)
        except trio_websocket.ConnectionClosed as exc:
            raise LinkClosed(str(exc.reason)) from None

    async def receive_text(self) -> str:
        try:
            message = await self.ws.get_message()
        except trio_websocket.ConnectionClosed as exc:
            raise LinkClosed(str(exc.reason)) from None
        if isinstance(message, bytes):
            raise LinkClosed("binary frames are not part of the protocol")
        return message

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        await self.ws.aclose(code, reason)


@dataclass(frozen=True)
class LinkStatistics:
    in_flight: int
    sent: int
    received: int
    late: int
    dropped: int


MessageHandler = Callable[[Message], Awaitable[None]]
HeartbeatFactory = Callable[[], Envelope]


class Link:
    """One live connection. Create it with `open_link`, never directly."""

    def __init__(
        self,
        transport: Transport,
        codec: FrameCodec,
        on_message: MessageHandler,
        send_channel: trio.MemorySendChannel[str],
    ) -> None:
        self.transport = transport
        self.codec = codec
        self._on_message = on_message
        self._send_channel = send_channel
        self._pending: dict[str, trio.MemorySendChannel[Message | None]] = {}
        self._closed = trio.Event()
        self.close_reason = ""
        self._sent = 0
        self._received = 0
        self._late = 0
        self._dropped = 0
        self._last_received = trio.current_time()
        self._heartbeat_sent = trio.Event()

    # --- public ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self, reason: str) -> None:
        """End the link, telling the peer ``reason`` (the WebSocket close frame carries it)."""
        self._mark_closed(reason)

    def statistics(self) -> LinkStatistics:
        return LinkStatistics(len(self._pending), self._sent, self._received, self._late, self._dropped)

    async def send(self, message: Envelope) -> None:
        """Queue one message for the writer; raises `AgentUnavailable` once closed."""
        if self.closed:
            raise AgentUnavailable(f"agent disconnected ({self.close_reason})")
        text = self.codec.encode(message)
        try:
            await self._send_channel.send(text)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise AgentUnavailable(f"agent disconnected ({self.close_reason})") from None

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
            raise AgentUnavailable(f"agent disconnected ({self.close_reason})")
        reply_send, reply_receive = trio.open_memory_channel[Message | None](1)
        self._pending[request_id] = reply_send
        answered = False
        try:
            await self.send(message)
            reply = await reply_receive.receive()
            answered = True
        finally:
            self._pending.pop(request_id, None)
            if not answered and not self.closed:
                await self._send_cancel(request_id)
        return self._unwrap(reply)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def heartbeat_sent(self) -> None:
        """Wait until the next heartbeat is queued (a keepalive ping can ride the same wakeup)."""
        await self._heartbeat_sent.wait()

    # --- internals -------------------------------------------------------

    def _unwrap(self, reply: Message | None) -> ProbeResponse:
        if reply is None:
            raise AgentUnavailable(f"agent disconnected ({self.close_reason})")
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
            self._late += 1
            return
        waiter.send_nowait(message)

    def _mark_closed(self, reason: str) -> None:
        if self.closed:
            return
        self.close_reason = reason
        self._closed.set()
        for waiter in self._pending.values():
            waiter.send_nowait(None)
        self._pending.clear()

    async def _read_loop(self) -> None:
        while True:
            text = await self.transport.receive_text()
            self._last_received = trio.current_time()
            self._received += 1
            await self._dispatch(text)

    async def _watch_liveness(self, timeout_s: float) -> None:
        """End the link when the peer sends nothing for ``timeout_s``.

        It wakes once per ``timeout_s`` or so, not per frame: moving a cancel
        scope's deadline on every frame costs the scheduler a heap entry each time.
        """
        while True:
            await trio.sleep_until(self._last_received + timeout_s)
            if trio.current_time() >= self._last_received + timeout_s:
                raise LinkClosed(f"peer silent for {timeout_s:g}s")

    async def _dispatch(self, text: str) -> None:
        try:
            message = self.codec.decode(text)
        except ProtocolError as exc:
            self._dropped += 1
            log.warning("dropped a frame: %s", exc.message)
            return
        if isinstance(message, ProbeResponse | ProbeError):
            self._route_reply(message)
        else:
            await self._on_message(message)

    async def _write_loop(self, receive_channel: trio.MemoryReceiveChannel[str]) -> None:
        async with receive_channel:
            async for text in receive_channel:
                await self.transport.send_text(text)
                self._sent += 1

    async def _heartbeat_loop(self, interval_s: float, make_heartbeat: HeartbeatFactory) -> None:
        start = trio.current_time()
        beat = 0
        while True:
            beat += 1
            await trio.sleep_until(start + beat * interval_s)
            await self.send(make_heartbeat())
            self._heartbeat_sent.set()
            self._heartbeat_sent = trio.Event()

    async def _supervise(self, name: str, job: Callable[[], Awaitable[None]]) -> None:
        """Run one link task; whatever ends it ends the whole link."""
        reason = "closed by owner"  # kept when the task is cancelled from outside
        try:
            await job()
            reason = f"{name} ended"
        except LinkClosed as exc:
            reason = str(exc) or "connection closed"
        except AgentUnavailable:
            reason = self.close_reason or "connection closed"
        finally:
            self._mark_closed(reason)


@asynccontextmanager
async def open_link(
    transport: Transport,
    codec: FrameCodec,
    on_message: MessageHandler,
    *,
    heartbeat_interval_s: float | None = None,
    make_heartbeat: HeartbeatFactory | None = None,
    liveness_timeout_s: float | None = None,
) -> AsyncIterator[Link]:
    """Run a link over ``transport`` for the duration of the block.

    The block is cancelled when the connection dies; afterwards every pending
    request has failed with `AgentUnavailable`. Leaving the block closes the
    connection with a normal close code.
    """
    send_channel, receive_channel = trio.open_memory_channel[str](SEND_BUFFER_FRAMES)
    link = Link(transport, codec, on_message, send_channel)
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
                await transport.close(CLOSE_NORMAL, link.close_reason)
            except LinkClosed:
                pass


async def _cancel_when_closed(link: Link, scope: trio.CancelScope) -> None:
    await link.wait_closed()
    scope.cancel()

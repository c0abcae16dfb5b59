"""A connection as a link sees it: text frames in and out, and a close with a code and a reason.

`Transport` is what `sonde.runtime.Link` runs over; `WebSocketTransport` adapts a
trio-websocket connection (the agent's side, the tests' peers), and the hub adapts its
ASGI WebSocket the same way. A connection that is gone raises `LinkClosed`, with the
peer's close code when it sent one.
"""

from __future__ import annotations

from typing import Protocol

import trio_websocket

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the hub stopping; the agent giving up on a hub that does not answer
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN_LATER = 1013  # RFC 6455's "try again later": the hub holds too many from that address


class LinkClosed(Exception):
    """The transport under a link is gone; ``code`` is the peer's close code when it sent one."""

    def __init__(self, reason: str = "", code: int | None = None) -> None:
        super().__init__(reason)
        self.code = code


def link_closed(exc: trio_websocket.ConnectionClosed) -> LinkClosed:
    return LinkClosed(describe_close(exc.reason), exc.reason.code if exc.reason else None)


def describe_close(reason: trio_websocket.CloseReason | None) -> str:
    """A WebSocket close as a phrase: the peer's reason first, then the code."""
    if reason is None:
        return "connection closed"
    if reason.reason:
        return f"{reason.reason} (close code {reason.code})"
    return f"connection closed ({reason.code} {reason.name})"


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
            raise link_closed(exc) from None

    async def receive_text(self) -> str:
        try:
            message = await self.ws.get_message()
        except trio_websocket.ConnectionClosed as exc:
            raise link_closed(exc) from None
        if isinstance(message, bytes):
            raise LinkClosed("binary frames are not part of the protocol")
        return message

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        await self.ws.aclose(code, reason)

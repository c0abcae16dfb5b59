"""A real WebSocket pair over `trio.testing.memory_stream_pair` (no sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing
import trio_websocket

from sonde.transport import WebSocketTransport


@asynccontextmanager
async def websocket_pair() -> AsyncIterator[tuple[WebSocketTransport, WebSocketTransport]]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        server_side: list[trio_websocket.WebSocketConnection] = []
        accepted = trio.Event()

        async def accept() -> None:
            request = await trio_websocket.wrap_server_stream(nursery, server_stream)
            server_side.append(await request.accept())
            accepted.set()

        nursery.start_soon(accept)
        client = await trio_websocket.wrap_client_stream(nursery, client_stream, "hub", "/ws/agent")  # type: ignore[arg-type]
        await accepted.wait()
        yield WebSocketTransport(client), WebSocketTransport(server_side[0])
        nursery.cancel_scope.cancel()

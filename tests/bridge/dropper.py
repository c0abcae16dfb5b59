"""A TCP relay in front of a real hub that can drop a connection as a request arrives on it.

That is what a client sees of a hub restarting under it: the request went out on a
kept-alive connection, and the connection closed with no answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

import trio


@dataclass
class Dropper:
    upstream_port: int
    drops_left: int = 0  # the next requests to drop, on whatever connection they come
    dropped: int = 0

    async def relay(self, client: trio.SocketStream) -> None:
        async with client, await trio.open_tcp_stream("127.0.0.1", self.upstream_port) as hub:
            async with trio.open_nursery() as nursery:

                async def to_hub() -> None:
                    while data := await client.receive_some(65536):
                        if self.drops_left > 0:
                            self.drops_left -= 1
                            self.dropped += 1
                            nursery.cancel_scope.cancel()  # both streams close: no answer comes
                            return
                        await hub.send_all(data)
                    nursery.cancel_scope.cancel()

                async def to_client() -> None:
                    while data := await hub.receive_some(65536):
                        await client.send_all(data)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(to_hub)
                nursery.start_soon(to_client)


@asynccontextmanager
async def dropping(upstream_port: int, port: int) -> AsyncIterator[tuple[Dropper, str]]:
    """Relay 127.0.0.1:``port`` to ``upstream_port``; yield the relay and its URL."""
    dropper = Dropper(upstream_port)
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")

    async def serve_one(stream: trio.SocketStream) -> None:
        try:
            await dropper.relay(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # either side went away

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, serve_one, listeners))
        yield dropper, f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()

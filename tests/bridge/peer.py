"""The client's end of a bridge: JSON lines to its stdin, JSON lines from its stdout."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from sonde.bridge.proxy import bridge_stdio
from sonde.bridge.settings import BridgeSettings
from tests.bridge.fakehub import GOOD_KEY, PROTOCOL_VERSION

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "peer", "version": "0"},
    },
}
TEST_DEADLINE_S = 20
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def eventually(
    condition: Callable[[], object], within_s: float = 5.0, interval_s: float = 0.01
) -> None:
    """Wait for what another process or a socket does, which gives no event to wait on."""
    with trio.fail_after(within_s):
        for _ in range(int(within_s / interval_s) + 1):
            if condition():
                return
            await trio.sleep(interval_s)
    raise AssertionError(f"not true within {within_s}s")


def call(request_id: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


class StdioPeer:
    def __init__(self, to_bridge: trio.abc.SendStream, from_bridge: trio.abc.ReceiveStream) -> None:
        self.to_bridge = to_bridge
        self.from_bridge = from_bridge
        self.lines: list[bytes] = []  # every line the bridge wrote, raw
        self._buffer = b""

    async def send(self, message: Any) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def send_raw(self, data: bytes) -> None:
        await self.to_bridge.send_all(data)

    async def receive(self) -> Any:
        line = await self.receive_line()
        assert line is not None, "the bridge closed stdout"
        return json.loads(line)

    async def receive_line(self) -> bytes | None:
        while b"\n" not in self._buffer:
            chunk = await self.from_bridge.receive_some(65536)
            if not chunk:
                assert not self._buffer, f"an unterminated line at EOF: {self._buffer!r}"
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        self.lines.append(line)
        return line

    async def rest(self) -> list[Any]:
        """Everything the bridge writes until it closes stdout."""
        messages = []
        while (line := await self.receive_line()) is not None:
            messages.append(json.loads(line))
        return messages

    async def close(self) -> None:
        await self.to_bridge.aclose()

    async def initialize(self) -> dict[str, Any]:
        await self.send(INITIALIZE)
        answer = await self.receive()
        assert answer["result"]["protocolVersion"] == PROTOCOL_VERSION, answer
        await self.send(INITIALIZED)
        return answer


@asynccontextmanager
async def bridged(
    url: str, key: str = GOOD_KEY, **options: Any
) -> AsyncIterator[tuple[StdioPeer, trio.Event]]:
    """Run `bridge_stdio` in this process on memory streams; yield the peer and a 'bridge ended' event.

    ``options`` go to `bridge_stdio` as they are.

    On exit the peer's stdin is closed and the bridge must end within 10 s; the
    whole block fails after `TEST_DEADLINE_S`.
    """
    stdin_send, stdin_receive = trio.testing.memory_stream_one_way_pair()
    stdout_send, stdout_receive = trio.testing.memory_stream_one_way_pair()
    ended = trio.Event()

    async def run() -> None:
        try:
            await bridge_stdio(BridgeSettings(url, key), stdin_receive, stdout_send, **options)
        finally:
            await stdout_send.aclose()
            ended.set()

    with trio.fail_after(TEST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            peer = StdioPeer(stdin_send, stdout_receive)
            yield peer, ended
            await peer.close()
            with trio.fail_after(10):
                await ended.wait()

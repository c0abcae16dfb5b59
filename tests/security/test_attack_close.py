"""Closing sockets at the worst moment must not stop the hub.

hypercorn 0.18 half-closed a connection outside its send lock; a client that
closed its WebSocket at the moment the hub closed it made the hub's reply to
that close raise `trio.BusyResourceError`, which ended the whole hub process
(sonde/hub/tcp_close.py). Anyone who could reach the port could do it, with
no credentials: every first frame that is not a valid register is refused by
closing the socket. These clients race the hub's close in three ways; before
the fix the hub died within the first thousand or so.
"""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest
import trio
import trio_websocket

from tests.e2e.procs import RunningHub, running_hub

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(180),
    # trio-websocket (the client here) now and then drops, unclosed, the socket of a
    # connection the server closed; the finalizer closes it. Not the hub's doing.
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket.socket fd=\d+, family=2:pytest.PytestUnraisableExceptionWarning"
    ),
]

CONNECTIONS = 3000
AT_ONCE = 30
NOT_A_REGISTER = '{"v":1}'


async def racing_client(url: str, style: int) -> None:
    """Open /ws/agent, send a frame the hub refuses, and close in one of three ways."""
    try:
        async with trio_websocket.open_websocket_url(url) as ws:
            await ws.send_message(NOT_A_REGISTER)
            if style == 0:  # read the refusal, then close as the hub's close arrives
                try:
                    await ws.get_message()
                except trio_websocket.ConnectionClosed:
                    pass
                await ws.aclose()
            elif style == 1:  # close at once, crossing the hub's refusal
                await ws.aclose()
            else:  # drop the TCP connection without a close frame, a moment later
                await trio.sleep(random.random() * 0.002)
                await ws._stream.aclose()
    except (
        trio_websocket.HandshakeError,
        trio_websocket.ConnectionClosed,
        OSError,
        trio.BrokenResourceError,
    ):
        pass  # only the hub's fate is under test
    except BaseException as exc:
        print("DEBUG", style, repr(exc)[:200])
        raise


def hub_running(hub: RunningHub) -> bool:
    return hub.proc.popen.poll() is None


async def test_clients_closing_as_the_hub_closes_do_not_stop_it(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        url = hub.url.replace("http://", "ws://") + "/ws/agent"
        limit = trio.Semaphore(AT_ONCE)

        async def one(style: int) -> None:
            async with limit:
                if hub_running(hub):
                    await racing_client(url, style)

        async with trio.open_nursery() as nursery:
            for i in range(CONNECTIONS):
                nursery.start_soon(one, i % 3)

        assert hub_running(hub), hub.proc.output[-3000:]
        log = hub.proc.output
        assert "BusyResourceError" not in log
        assert "Error in ASGI Framework" not in log
        assert log.count("refused agent connection") > CONNECTIONS // 2
        with hub.client() as http:
            assert http.get("/api/v1/agents").status_code == 200
        async with httpx.AsyncClient() as plain:
            assert (await plain.get(f"{hub.url}/api/v1/agents")).status_code == 401

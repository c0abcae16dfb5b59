"""`GuardedTCPServer` under a real hypercorn server on 127.0.0.1: it counts connections for the collector;
and `WaitingConnections`, its bound on connections that have not sent a request.

(How it keeps one connection from ending the server, and lets go of a closed
one at once, is driven against a real `sonde hub` in
tests/security/test_attack_connections.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from sonde.hub.tcp_guard import CONNECTIONS, WaitingConnections, use_guarded_tcp_server


async def tiny_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def wait_for_count(open_now: int, closed_total: int) -> None:
    """Poll: the count is the server's, moved by its own connection tasks."""
    with trio.fail_after(10):
        while (CONNECTIONS.open_now(), CONNECTIONS.closed_total()) != (open_now, closed_total):  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_every_connection_is_counted_open_and_then_closed() -> None:
    use_guarded_tcp_server()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 75.0
    stop = trio.Event()
    open_before, closed_before = CONNECTIONS.open_now(), CONNECTIONS.closed_total()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(tiny_app, config, shutdown_trigger=stop.wait, task_status=task_status)
        )  # type: ignore[arg-type]
        host, port = binds[0].removeprefix("http://").rsplit(":", 1)
        streams = [await trio.open_tcp_stream(host, int(port)) for _ in range(5)]
        await wait_for_count(open_before + 5, closed_before)
        await streams[0].send_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):  # answered; then idle on keep-alive
            answer += await streams[0].receive_some()
        for stream in streams:
            await stream.aclose()
        # counted closed at once, not when the 75 s keep-alive timer runs out
        await wait_for_count(open_before, closed_before + 5)
        stop.set()


def test_each_address_may_keep_a_bounded_number_of_connections_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waiting = WaitingConnections(limit=2)
    assert waiting.admit("10.0.0.1")
    assert waiting.admit("10.0.0.1")
    assert not waiting.admit("10.0.0.1")
    assert not waiting.admit("10.0.0.1")
    assert waiting.admit("10.0.0.2")  # another address has its own bound
    waiting.started("10.0.0.1")  # one began its request (or ended)
    assert waiting.admit("10.0.0.1")
    assert [r.message for r in caplog.records].count(
        "refusing connections from 10.0.0.1: 2 of its connections are idle (no request yet, none since "
        "the last, or an agent socket with no register yet); more are refused, and those going idle "
        "closed, until some are used"
    ) == 1  # once a minute at most, not once per refusal
    for _ in range(2):
        waiting.started("10.0.0.1")
    waiting.started("10.0.0.2")
    assert waiting.waiting("10.0.0.1") == waiting.waiting("10.0.0.2") == 0

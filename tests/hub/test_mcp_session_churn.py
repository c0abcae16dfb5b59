"""An MCP session's end counts as churn for the hub's garbage collector (`sonde.hub.gc_policy`).

An ended session leaves cyclic garbage that only a full collection frees, and the hub runs
one only after churn. Counted by closed connections alone, sessions opened and ended over
connections that stay open (a reverse proxy's pooled ones) grew a real hub without end:
2.5k to 58k tracked objects and 108 to 172 MiB over 1,200 sessions, none of it freed.
Here the hub's session manager serves a bare MCP server in process, so no connection
opens or closes at all: only the session can be what is counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from mcp.server.lowlevel import Server

from sonde.hub.mcp_sessions import SessionManager
from sonde.hub.tcp_guard import CONNECTIONS

PROTOCOL_VERSION = "2025-06-18"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "churn-test", "version": "1"},
    },
}


async def open_and_end(client: httpx.AsyncClient) -> None:
    opened = await client.post("/mcp", json=INITIALIZE, headers=HEADERS)
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL_VERSION}
    ended = await client.delete("/mcp", headers=HEADERS | session)
    assert ended.status_code == 200, ended.text
    gone = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=HEADERS | session
    )
    assert gone.status_code == 404  # ended for good


@asynccontextmanager
async def served(idle_timeout_s: float) -> AsyncIterator[tuple[SessionManager, httpx.AsyncClient]]:
    """The hub's session manager serving a bare MCP server, and a client of it (in process)."""
    manager = SessionManager(
        app=Server[Any]("churn-test"), json_response=True, session_idle_timeout=idle_timeout_s
    )
    async with manager.run():
        transport = httpx.ASGITransport(app=manager.handle_request)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield manager, client


async def test_each_ended_session_counts_as_a_close() -> None:
    async with served(60) as (_, client):
        before = CONNECTIONS.closed_total()
        for _ in range(3):
            await open_and_end(client)
        with trio.fail_after(5):
            while CONNECTIONS.closed_total() < before + 3:  # noqa: ASYNC110 (the count has no event)
                await trio.sleep(0.01)
        await trio.sleep(0.1)
    assert CONNECTIONS.closed_total() == before + 3


async def test_a_session_ended_by_its_idle_timeout_counts_as_a_close() -> None:
    async with served(0.2) as (manager, client):
        before = CONNECTIONS.closed_total()
        opened = await client.post("/mcp", json=INITIALIZE, headers=HEADERS)
        assert opened.status_code == 200, opened.text
        with trio.fail_after(5):
            while manager._server_instances:  # noqa: ASYNC110 (the SDK's table has no event)
                await trio.sleep(0.01)
        await trio.sleep(0.1)
    assert CONNECTIONS.closed_total() == before + 1

"""The hub-wide MCP session limit: sessions left open by some keys never shut the others out.

A reviewer's hub was filled by 50 keys each within its share (200 x 50 = 10,000, the SDK's
hub-wide limit): every new session of every key, admin included, got 503 "Too many open
sessions" for up to 30 minutes, as only a key's own sessions were ever ended to make room.
Now the hub's longest-idle session is ended, whoever's it is; only when every one is busy is
a new session refused, with a message naming the hub-wide limit and a Retry-After.

The hub's session manager serves a bare MCP server in process with a limit of 4; each request
names its key in a test header that a wrapper turns into the ASGI user, as the hub's
authentication does (`sonde.hub.asgi`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import Server

from sonde.hub.mcp_sessions import SessionManager
from tests.e2e.mcpclient import initialize_request

pytestmark = pytest.mark.timeout(30)

HUB_LIMIT = 4
PROTOCOL_VERSION = "2025-06-18"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = initialize_request(PROTOCOL_VERSION, request_id=1)
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def as_key(app: Any) -> Any:
    """``app`` with each request's ``x-test-key`` made its authenticated user."""

    async def keyed(scope: Any, receive: Any, send: Any) -> None:
        key = dict(scope["headers"])[b"x-test-key"].decode()
        user = AuthenticatedUser(AccessToken(token="", client_id=key, scopes=[]))
        await app({**scope, "user": user}, receive, send)

    return keyed


@asynccontextmanager
async def served() -> AsyncIterator[tuple[SessionManager, httpx.AsyncClient]]:
    manager = SessionManager(
        app=Server[Any]("limits-test"), json_response=True, session_idle_timeout=600, max_sessions=HUB_LIMIT
    )
    manager.max_sessions_per_owner = 3
    async with manager.run():
        transport = httpx.ASGITransport(app=as_key(manager.handle_request))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield manager, client


async def open_session(client: httpx.AsyncClient, key: str) -> httpx.Response:
    return await client.post("/mcp", json=INITIALIZE, headers=HEADERS | {"x-test-key": key})


def session_headers(key: str, session: str) -> dict[str, str]:
    return HEADERS | {"x-test-key": key, "mcp-session-id": session, "mcp-protocol-version": PROTOCOL_VERSION}


async def ping(client: httpx.AsyncClient, key: str, session: str) -> int:
    return (await client.post("/mcp", json=PING, headers=session_headers(key, session))).status_code


async def hold_event_stream(manager: SessionManager, key: str, session: str, *, task_status: Any) -> None:
    """Hold the session's GET event stream open (the session is busy) until cancelled."""
    headers = session_headers(key, session) | {"accept": "text/event-stream"}
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/mcp",
        "query_string": b"",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
    }
    started = False
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:  # the request (no body), then nothing: the client stays
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal started
        if message["type"] == "http.response.start" and not started:
            assert message["status"] == 200, message
            started = True
            task_status.started()

    await as_key(manager.handle_request)(scope, receive, send)


async def test_sessions_of_other_keys_filling_the_hub_make_room_for_a_new_one() -> None:
    async with served() as (_, client):
        sessions = {}
        for key in ("k1", "k2", "k3", "k4"):
            opened = await open_session(client, key)
            assert opened.status_code == 200, opened.text
            sessions[key] = opened.headers["mcp-session-id"]
        assert await ping(client, "k1", sessions["k1"]) == 200  # now k2's is the hub's idlest
        admitted = await open_session(client, "admin")
        assert admitted.status_code == 200, admitted.text
        assert await ping(client, "k2", sessions["k2"]) == 404  # ended, as the SDK answers an unknown one
        for key in ("k1", "k3", "k4"):
            assert await ping(client, key, sessions[key]) == 200
        assert await ping(client, "admin", admitted.headers["mcp-session-id"]) == 200


async def test_at_the_hub_limit_with_every_session_busy_a_new_one_is_told_which_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with served() as (manager, client), trio.open_nursery() as nursery:
        for key in ("k1", "k2", "k3", "k4"):
            opened = await open_session(client, key)
            assert opened.status_code == 200, opened.text
            await nursery.start(hold_event_stream, manager, key, opened.headers["mcp-session-id"])
        for _ in range(3):  # a client retrying: refused each time, logged once
            refused = await open_session(client, "admin")
            assert refused.status_code == 503
            assert refused.headers.get("retry-after", "").isdigit()
            message = json.loads(refused.text)["error"]["message"]
            assert "Too many open sessions" in message
            assert f"the hub's limit of {HUB_LIMIT}" in message
        said = [r.getMessage() for r in caplog.records if "refusing new MCP sessions" in r.getMessage()]
        assert len(said) == 1, said
        assert "sessions are already open" not in caplog.text  # the SDK's line, once per request
        nursery.cancel_scope.cancel()

"""The root ASGI app: `/mcp` to the MCP session manager, `/ws/agent` to the agent socket, the rest to Quart.

It owns the lifespan: the MCP session manager runs for exactly as long as
Quart's lifespan, and a startup failure is reported as
``lifespan.startup.failed`` so hypercorn exits non-zero instead of serving
with MCP broken.
"""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from sonde.hub.agent_socket import serve_agent_websocket
from sonde.hub.auth import BEARER_CHALLENGE
from sonde.hub.mcp_answers import answering_as_json, choose_answer
from sonde.hub.mcp_server import SondeUser
from sonde.hub.tools import all_tools

if TYPE_CHECKING:
    from sonde.hub.core import Hub

log = logging.getLogger(__name__)
Scope = dict[str, Any]
AGENT_SOCKET_PATH = "/ws/agent"
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The whole request body; None if the client went away first.

    Raises `BodyTooLarge` once it grows past ``limit`` bytes.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Any) -> Any:
    """An ASGI ``receive`` that hands over ``body`` (already read) first, then defers to ``receive``."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed


def is_mcp_path(path: str) -> bool:
    return path == "/mcp" or path == "/mcp/"


async def send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def has_request_body(scope: Scope) -> bool:
    """Whether the request says a body follows (a length above 0, or chunks)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


class UnreadBodyGuard:
    """One request's ASGI ``receive`` and ``send`` that add ``Connection: close`` to a response
    begun before the request's body was read to its end.

    Hypercorn closes such a connection once the response is sent (h11 cannot take the next
    request while the client may still be sending this one's body), but it does not say so: a
    client that keeps connections alive sent its next request into a closing socket and got no
    answer ("Server disconnected without sending a response"). It happens to a refusal from the
    headers alone (401, 413, 429) and to a GET that carries a body, at random, as the body's
    bytes were or were not taken in before the response ended.
    """

    def __init__(self, receive: Any, send: Any) -> None:
        self._receive = receive
        self._send = send
        self._body_read = False

    async def receive(self) -> Any:
        message = await self._receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._body_read = True  # the last of the body, or the client went away
        return message

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start" and not self._body_read:
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await self._send(message)


class RootApp:
    def __init__(self, hub: Hub, mcp: StreamableHTTPSessionManager, quart_app: Any) -> None:
        self.hub = hub
        self.mcp = mcp
        self.quart_app = quart_app
        self.progress_tools = frozenset(spec.name for spec in all_tools() if spec.reports_progress)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and has_request_body(scope):
            guard = UnreadBodyGuard(receive, send)
            receive, send = guard.receive, guard.send
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
        elif scope["type"] == "http" and is_mcp_path(scope["path"]):
            await self.serve_mcp(scope, receive, send)
        elif scope["type"] == "websocket" and scope["path"] == AGENT_SOCKET_PATH:
            await serve_agent_websocket(self.hub, scope, receive, send)
        else:
            await self.quart_app(scope, receive, send)

    async def serve_mcp(self, scope: Scope, receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = (scope.get("client") or ("?",))[0]
        caller = await self.hub.keys.authenticate(headers.get("authorization"))

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        if caller is None:
            retry = self.hub.keys.failures.retry_after(client)
            if retry is not None:  # a valid key is never held back: its address may be a shared proxy
                await send_json(
                    send_with_headers,
                    429,
                    {
                        "error": {
                            "code": "too_many_failures",
                            "message": "too many failed authentications from this address; "
                            f"try again in {int(retry) + 1} s",
                        }
                    },
                    [(b"retry-after", str(int(retry) + 1).encode())],
                )
                return
            self.hub.keys.failures.failed(client)
            await self.hub.audit(
                "anonymous",
                "mcp.auth",
                None,
                "denied",
                detail={"client": client, "path": scope["path"]},
                unauthenticated=True,
            )
            await send_json(
                send_with_headers,
                401,
                {
                    "error": {
                        "code": "unauthorized",
                        "message": "a valid API key is required: Authorization: Bearer <key>",
                    }
                },
                [(b"www-authenticate", BEARER_CHALLENGE.encode())],
            )
            return
        scope = {**scope, "user": SondeUser(caller), "path": "/mcp"}
        if scope["method"] != "POST":
            await self.mcp.handle_request(scope, receive, send_with_headers)
            return
        limit = self.mcp.max_request_body_size  # the SDK's own cap (4 MiB unless set)
        try:
            if int(headers.get("content-length") or 0) > limit:  # hypercorn has checked it is a number
                raise BodyTooLarge
            body = await read_body(receive, limit)
        except BodyTooLarge:
            await send_json(
                send_with_headers,
                413,
                {
                    "error": {
                        "code": "body_too_large",
                        "message": f"an MCP request body may be at most {limit} bytes",
                    }
                },
                [],
            )
            return
        if body is None:
            return
        with answering_as_json(choose_answer(body, self.progress_tools)):
            await self.mcp.handle_request(scope, replay_body(body, receive), send_with_headers)

    async def lifespan(self, scope: Scope, receive: Any, send: Any) -> None:
        started = False
        held_shutdown: dict[str, Any] | None = None

        async def relay(message: dict[str, Any]) -> None:
            nonlocal started, held_shutdown
            if message["type"] == "lifespan.startup.complete":
                started = True
            if message["type"] == "lifespan.shutdown.complete":
                held_shutdown = message  # sent once the MCP manager has stopped
                return
            await send(message)

        try:
            async with self.mcp.run():
                await self.quart_app(scope, receive, relay)
        except Exception as exc:  # the lifespan boundary: report, never serve half-started
            log.exception("hub startup failed")
            if not started:
                await send({"type": "lifespan.startup.failed", "message": f"hub startup failed: {exc}"})
                return
            await send({"type": "lifespan.shutdown.failed", "message": f"hub shutdown failed: {exc}"})
            return
        await send(held_shutdown or {"type": "lifespan.shutdown.complete"})

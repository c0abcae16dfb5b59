"""The root ASGI app: `/mcp` to the MCP session manager, `/ws/agent` to the agent socket, the rest to Quart.

A POST to ``/mcp`` is bounded before the SDK sees it: an authenticated key, at
most `MAX_MCP_IN_FLIGHT_PER_KEY` such requests of that key being served (and
`MAX_MCP_IN_FLIGHT` in all), a body of at most `MAX_MCP_BODY_BYTES` read whole
within `MCP_BODY_DEADLINE_S`. Each refusal is immediate and says why, in the JSON
error shape; so does the SDK's refusal of a Host or Origin (DNS-rebinding protection),
replaced with one naming the ``--allowed-host`` that admits it (`sonde.hub.mcp_refusals`).

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

import trio
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from sonde.hub.agent_socket import serve_agent_websocket
from sonde.hub.auth import BEARER_CHALLENGE, Caller, bearer_secret
from sonde.hub.keys import revoked_key_use
from sonde.hub.mcp_answers import McpPost, plan_answer, serving, takes_event_stream
from sonde.hub.mcp_refusals import (
    BATCH_MESSAGE,
    BATCH_STATUS,
    BATCH_WORD,
    RebindingLog,
    SdkRefusalAnswer,
    is_batch,
    send_json,
    send_refusal,
)
from sonde.hub.mcp_server import SondeUser
from sonde.hub.mcp_session_end import ended_quietly
from sonde.hub.rest import WHERE_THINGS_ARE
from sonde.hub.tools import agent_waiting_calls, all_tools

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
# A tool call's arguments are a few hundred bytes (every list and string a tool
# takes is bounded: 16 tags, 32 categories, a 128-character probe name); the
# SDK's own cap of 4 MiB let 16 concurrent bodies take the hub to 1.2 GB and
# hold the event loop for seconds while each was parsed (here, then by the SDK).
MAX_MCP_BODY_BYTES = 256 * 1024
MCP_BODY_DEADLINE_S = 30.0  # to send a whole request body, from its headers on
# Requests being served at once. One key's share is far above what one
# assistant sends (the benchmark runs 50 clients on one key); the hub-wide cap
# bounds what all keys together can hold (bodies, tasks, sockets).
MAX_MCP_IN_FLIGHT_PER_KEY = 256
MAX_MCP_IN_FLIGHT = 1024
ADMIN_SHARE = 8  # one place in 8 of those is kept for admin keys: four member keys at their cap fill the rest
BUSY_RETRY_AFTER_S = 1


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


class McpInFlight:
    """The MCP POSTs being served, per API key and in all; past either cap a request is refused.

    The last ``admin_reserve`` places are an admin key's: four member keys at their own cap
    (with clients that ask and never read, say) filled the hub's and kept every admin out,
    as an agent keeps its last probe slots for admin keys.
    """

    def __init__(
        self,
        per_key: int = MAX_MCP_IN_FLIGHT_PER_KEY,
        total: int = MAX_MCP_IN_FLIGHT,
        admin_reserve: int | None = None,
    ) -> None:
        self.per_key = per_key
        self.total = total
        self.admin_reserve = total // ADMIN_SHARE if admin_reserve is None else admin_reserve
        self._by_key: dict[str, int] = {}
        self._all = 0

    def enter(self, key_id: str, admin: bool = False) -> str | None:
        """Count one more request of ``key_id``; or, at a cap, count nothing and say which."""
        held = self._by_key.get(key_id, 0)
        if held >= self.per_key:
            return "key"
        if self._all >= (self.total if admin else self.total - self.admin_reserve):
            return "hub"
        self._by_key[key_id] = held + 1
        self._all += 1
        return None

    def leave(self, key_id: str) -> None:
        held = self._by_key[key_id] - 1
        if held:
            self._by_key[key_id] = held
        else:
            del self._by_key[key_id]
        self._all -= 1

    def held(self, key_id: str) -> int:
        return self._by_key.get(key_id, 0)


def busy_refusal(cap: str, in_flight: McpInFlight) -> tuple[int, str, str]:
    """The status, word and message refusing a request past ``cap`` ("key" or "hub")."""
    if cap == "key":
        message = (
            f"this API key has {in_flight.per_key} MCP requests being served already; "
            f"try again in {BUSY_RETRY_AFTER_S} s"
        )
        return 429, "too_many_requests", message
    message = (
        f"the hub is serving {in_flight.total - in_flight.admin_reserve} MCP requests or more already"
        f" (its last {in_flight.admin_reserve} places are kept for admin keys); try again in {BUSY_RETRY_AFTER_S} s"
    )
    return 503, "busy", message


# Which of several would be meant is a guess: REST's framework read the first, the MCP route the
# last, and a proxy that adds its own header made the two surfaces disagree on the caller.
REPEATED_AUTHORIZATION = "repeated_authorization"
REPEATED_AUTHORIZATION_MESSAGE = "this request has more than one Authorization header: send one"


def repeats_authorization(scope: Scope) -> bool:
    return sum(1 for name, _ in scope["headers"] if name == b"authorization") > 1


def lowercase_host(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The headers with Host in lower case: a host name is case-insensitive (RFC 9110 4.2.3),
    and the DNS-rebinding check compares it as a string."""
    return [(name, value.lower() if name == b"host" else value) for name, value in headers]


def is_mcp_path(path: str) -> bool:
    return path == "/mcp" or path == "/mcp/"


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
        self.waits_on_agents = agent_waiting_calls(hub, all_tools())  # their calls may stream: mcp_answers
        self.in_flight = McpInFlight()
        self.rebinding_log = RebindingLog()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and has_request_body(scope):
            guard = UnreadBodyGuard(receive, send)
            receive, send = guard.receive, guard.send
        if scope["type"] == "http" and repeats_authorization(scope):
            await self.refuse_repeated_authorization(scope, send)
        elif scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
        elif scope["type"] == "http" and is_mcp_path(scope["path"]):
            await self.serve_mcp(scope, receive, send)
        elif scope["type"] == "websocket" and scope["path"] == AGENT_SOCKET_PATH:
            await serve_agent_websocket(self.hub, scope, receive, send)
        elif scope["type"] == "websocket":
            await refuse_websocket_elsewhere(scope, receive, send)
        else:
            await self.quart_app(scope, receive, send)

    async def refuse_repeated_authorization(self, scope: Scope, send: Any) -> None:
        """400 on every surface: on /mcp as its other refusals are, elsewhere as REST's errors are."""
        if is_mcp_path(scope["path"]):
            await send_refusal(send, 400, REPEATED_AUTHORIZATION, REPEATED_AUTHORIZATION_MESSAGE)
        else:
            body = {"error": {"code": REPEATED_AUTHORIZATION, "message": REPEATED_AUTHORIZATION_MESSAGE}}
            await send_json(send, 400, body, [])

    async def serve_mcp(self, scope: Scope, receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = (scope.get("client") or ("?",))[0]
        caller = await self.hub.keys.authenticate(headers.get("authorization"))

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        if caller is None:
            await self.refuse_unauthenticated(scope, client, headers.get("authorization"), send_with_headers)
            return
        scope = {
            **scope,
            "user": SondeUser(caller),
            "path": "/mcp",
            "headers": lowercase_host(scope["headers"]),
        }
        answer = SdkRefusalAnswer(send_with_headers, headers, client, self.rebinding_log)
        try:
            if scope["method"] == "POST":
                await self.serve_mcp_post(scope, headers, caller, receive, answer.send)
            else:
                await self.mcp.handle_request(scope, receive, answer.send)
        finally:
            if answer.refused:  # the SDK's DNS-rebinding check: a valid key, from a page it must not serve
                with trio.CancelScope(shield=True):
                    await self.audit_rebinding(caller.key_id, client, headers, answer.refused)

    async def refuse_unauthenticated(
        self, scope: Scope, client: str, authorization: str | None, send: Any
    ) -> None:
        """429 while the address is held back (`FailureLimiter`), else 401, audited: a revoked key
        named by its id (looked up only here, past the limiter) and told it was revoked."""
        retry = self.hub.keys.failures.retry_after(client)
        if retry is not None:  # a valid key is never held back: its address may be a shared proxy
            await send_refusal(
                send,
                429,
                "too_many_failures",
                f"too many failed authentications from this address; try again in {int(retry) + 1} s",
                [(b"retry-after", str(int(retry) + 1).encode())],
            )
            return
        self.hub.keys.failures.failed(client)
        secret = bearer_secret(authorization)
        revoked = None if secret is None else await self.hub.store.read(revoked_key_use, secret)
        await self.hub.audit(
            "anonymous",
            "mcp.auth",
            None,
            "denied",
            detail={"client": client, "path": scope["path"], **(revoked.detail if revoked else {})},
            unauthenticated=True,
        )
        message = revoked.message if revoked else "a valid API key is required: Authorization: Bearer <key>"
        await send_refusal(
            send, 401, "unauthorized", message, [(b"www-authenticate", BEARER_CHALLENGE.encode())]
        )

    async def audit_rebinding(self, key_id: str, client: str, headers: dict[str, str], reason: str) -> None:
        detail = {"client": client, "reason": reason, reason: headers.get(reason, "")}
        await self.hub.audit(key_id, "mcp.request", None, "denied", detail=detail, unauthenticated=True)

    async def serve_mcp_post(
        self, scope: Scope, headers: dict[str, str], caller: Caller, receive: Any, send: Any
    ) -> None:
        key_id = caller.key_id
        busy = self.in_flight.enter(key_id, admin=caller.is_admin)
        if busy is not None:
            status, word, message = busy_refusal(busy, self.in_flight)
            await send_refusal(
                send, status, word, message, [(b"retry-after", str(BUSY_RETRY_AFTER_S).encode())]
            )
            return
        try:
            body = await self.read_mcp_body(headers, receive, send)
            if body is None:
                return
            if is_batch(body):
                await send_refusal(send, BATCH_STATUS, BATCH_WORD, BATCH_MESSAGE)
                return
            plan = plan_answer(body, self.waits_on_agents, takes_event_stream(headers.get("accept", "")))
            post = McpPost(plan, body, receive, send)
            with serving(post), ended_quietly(post):
                await self.mcp.handle_request(scope, post.receive, post.send)
        finally:
            self.in_flight.leave(key_id)

    async def read_mcp_body(self, headers: dict[str, str], receive: Any, send: Any) -> bytes | None:
        """The request's body; None if it was refused (413, 408) or the client went away."""
        limit = min(MAX_MCP_BODY_BYTES, self.mcp.max_request_body_size)
        body: bytes | None = None
        try:
            if int(headers.get("content-length") or 0) > limit:  # hypercorn has checked it is a number
                raise BodyTooLarge
            with trio.move_on_after(MCP_BODY_DEADLINE_S):
                body = await read_body(receive, limit)
                return body
        except BodyTooLarge:
            message = f"an MCP request body may be at most {limit} bytes; tool arguments are far smaller"
            await send_refusal(send, 413, "body_too_large", message)
            return None
        message = f"the request body did not arrive within {MCP_BODY_DEADLINE_S:g} s"
        await send_refusal(send, 408, "body_timeout", message)
        return None

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


async def refuse_websocket_elsewhere(scope: Scope, receive: Any, send: Any) -> None:
    """A 404 for a WebSocket to any other path (Quart, which has no WebSocket routes, answered
    it with a 500 and logged a traceback of some 2 KB: anyone could fill the hub's log)."""
    if (await receive())["type"] != "websocket.connect":
        return
    path = str(scope["path"])[:200]
    message = f"no WebSocket is served at {path}: agents connect to {AGENT_SOCKET_PATH}; {WHERE_THINGS_ARE}"
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": "no WebSocket is served here"})
        return
    body = json.dumps({"error": {"code": "not_found", "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send(
        {"type": "websocket.http.response.start", "status": 404, "headers": [*headers, *SECURITY_HEADERS]}
    )
    await send({"type": "websocket.http.response.body", "body": body})

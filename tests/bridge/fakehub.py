"""A small, real MCP server over Streamable HTTP that records every request it gets.

It behaves like the hub where the bridge can tell (sessions by
``Mcp-Session-Id``, 404 for a session it no longer knows, SSE answers, a
standalone GET stream, DELETE) and it can be told to misbehave: forget its
sessions, answer 500, hang, split its SSE into tiny chunks with CRLF line
ends and comments. It runs in the test's own trio loop under hypercorn, on
127.0.0.1 port 0.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

GOOD_KEY = "sonde_test-key"
PROTOCOL_VERSION = "2025-11-25"
TOOLS = ["echo", "wait", "progress", "trickle", "gated", "fail", "hang", "hang_json", "html"]


@dataclass
class SeenRequest:
    method: str
    headers: dict[str, str]
    body: Any = None

    @property
    def rpc_method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None


@dataclass
class FakeHub:
    """The ASGI app. Tweak the public fields from a test to change how it answers."""

    json_answers: bool = False  # application/json instead of SSE
    accept_initialize: bool = True
    line_ending: str = "\n"
    chunk_bytes: int = 0  # when set, SSE bodies go out in chunks this small
    requests: list[SeenRequest] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)
    sessions_started: int = 0
    hanging: int = 0
    hang_disconnects: int = 0
    get_streams: int = 0
    gate: trio.Event = field(default_factory=trio.Event)  # "gated" answers once it is set
    delete_delay_s: float = 0.0  # how long a DELETE waits before its answer
    forgets_at_delete: bool = False  # a DELETE finds its session gone (404), as on a hub restarted

    def __post_init__(self) -> None:
        self.push_send, self.push_receive = trio.open_memory_channel[dict[str, Any]](16)

    def seen(self, method: str, rpc_method: str | None = None) -> list[SeenRequest]:
        return [
            r
            for r in self.requests
            if r.method == method and (rpc_method is None or r.rpc_method == rpc_method)
        ]

    def forget_sessions(self) -> None:
        self.sessions.clear()

    async def push(self, message: dict[str, Any]) -> None:
        """Send ``message`` on the standalone GET stream."""
        await self.push_send.send(message)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = await read_body(receive) if scope["method"] == "POST" else b""
        seen = SeenRequest(scope["method"], headers, json.loads(body) if body else None)
        self.requests.append(seen)
        http = Http(send, self.line_ending, self.chunk_bytes)
        if headers.get("authorization") != f"Bearer {GOOD_KEY}":
            await http.json(
                401, {"error": {"code": "unauthorized", "message": "a valid API key is required"}}
            )
        elif scope["path"] == "/api/v1/agents":
            await http.json(200, {"agents": [{"name": "alpha"}]})
        elif scope["method"] == "POST":
            await self.post(seen, http, receive)
        elif not self.known_session(headers) or (scope["method"] == "DELETE" and self.forgets_at_delete):
            await http.json(404, rpc_error(None, -32600, "Session not found"))
        elif scope["method"] == "GET":
            await self.get_stream(http, receive)
        elif scope["method"] == "DELETE":
            self.sessions.discard(headers["mcp-session-id"])
            await trio.sleep(self.delete_delay_s)
            await http.json(200, {})
        else:
            await http.json(405, {})

    def known_session(self, headers: dict[str, str]) -> bool:
        return headers.get("mcp-session-id") in self.sessions

    async def post(self, seen: SeenRequest, http: Http, receive: Any) -> None:
        message = seen.body
        if seen.rpc_method == "initialize" and not self.accept_initialize:
            await http.text(503, "not now")
        elif seen.rpc_method == "initialize":
            self.sessions_started += 1
            session = f"session-{self.sessions_started}"
            self.sessions.add(session)
            result = {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fakehub", "version": "0"},
            }
            await self.answer(http, [rpc_result(message["id"], result)], {"mcp-session-id": session})
        elif "mcp-session-id" not in seen.headers:
            await http.json(400, rpc_error(None, -32600, "Bad Request: Missing session ID"))
        elif not self.known_session(seen.headers):
            await http.json(404, rpc_error(None, -32600, "Session not found"))
        elif "id" not in message or "method" not in message:
            await http.empty(202)  # a notification, or the client's answer to us
        elif seen.rpc_method == "tools/list":
            tools = [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]
            await self.answer(http, [rpc_result(message["id"], {"tools": tools})])
        elif seen.rpc_method == "tools/call":
            await self.call_tool(message, http, receive)
        elif seen.rpc_method == "ping":
            await self.answer(http, [rpc_result(message["id"], {})])
        else:
            await self.answer(http, [rpc_error(message["id"], -32601, "Method not found")])

    async def call_tool(self, message: dict[str, Any], http: Http, receive: Any) -> None:
        name = message["params"]["name"]
        arguments = message["params"].get("arguments") or {}
        if name == "fail":
            await http.text(500, "boom")
        elif name == "html":
            await http.text(200, "<html>a login page, not MCP</html>")
        elif name == "hang":
            self.hanging += 1
            await http.start(200, "text/event-stream")
            await wait_disconnect(receive)
            self.hang_disconnects += 1
        elif name == "hang_json":  # like the hub's tool calls: no headers until the answer, which never comes
            self.hanging += 1
            await wait_disconnect(receive)
            self.hang_disconnects += 1
        elif name == "wait":
            await http.start(200, "text/event-stream")
            await trio.sleep(arguments["seconds"])
            await http.events([rpc_result(message["id"], text_result(f"waited {arguments['seconds']}"))])
        elif name == "gated":
            await http.start(200, "text/event-stream")
            note = {"progressToken": "gate", "progress": 0, "message": "waiting for the gate"}
            await http.events([{"jsonrpc": "2.0", "method": "notifications/progress", "params": note}])
            await self.gate.wait()
            await http.events([rpc_result(message["id"], text_result("through"))])
        elif name == "progress":
            token = message["params"]["_meta"]["progressToken"]
            await http.start(200, "text/event-stream")
            for step in (1, 2, 3):
                note = {"progressToken": token, "progress": step, "total": 3, "message": f"step {step}"}
                await http.events([{"jsonrpc": "2.0", "method": "notifications/progress", "params": note}])
            await http.events([rpc_result(message["id"], text_result("done"))])
        elif name == "trickle":  # a progress notification every `every` seconds, `steps` times
            await http.start(200, "text/event-stream")
            for step in range(1, arguments["steps"] + 1):
                await trio.sleep(arguments["every"])
                note = {"progressToken": "trickle", "progress": step}
                await http.events([{"jsonrpc": "2.0", "method": "notifications/progress", "params": note}])
            await http.events([rpc_result(message["id"], text_result("trickled"))])
        else:
            await self.answer(http, [rpc_result(message["id"], text_result(json.dumps(arguments)))])

    async def answer(
        self, http: Http, messages: list[dict[str, Any]], headers: dict[str, str] | None = None
    ) -> None:
        if self.json_answers:
            await http.json(200, messages[0], headers)
            return
        await http.start(200, "text/event-stream", headers)
        await http.events(messages)

    async def get_stream(self, http: Http, receive: Any) -> None:
        self.get_streams += 1
        await http.start(200, "text/event-stream")
        async with trio.open_nursery() as nursery:

            async def relay() -> None:
                async for message in self.push_receive:
                    await http.events([message])

            nursery.start_soon(relay)
            await wait_disconnect(receive)
            nursery.cancel_scope.cancel()


class Http:
    """Writes one ASGI HTTP response; SSE events can be cut into tiny chunks."""

    def __init__(self, send: Any, line_ending: str, chunk_bytes: int) -> None:
        self.send = send
        self.line_ending = line_ending
        self.chunk_bytes = chunk_bytes
        self.event_id = 0

    async def start(self, status: int, content_type: str, headers: dict[str, str] | None = None) -> None:
        pairs = [(b"content-type", content_type.encode())]
        pairs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await self.send({"type": "http.response.start", "status": status, "headers": pairs})

    async def body(self, data: bytes, more: bool = False) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        await self.start(status, "application/json", headers)
        await self.body(json.dumps(value).encode())

    async def text(self, status: int, text: str) -> None:
        await self.start(status, "text/plain")
        await self.body(text.encode())

    async def empty(self, status: int) -> None:
        await self.start(status, "text/plain")
        await self.body(b"")

    async def events(self, messages: list[dict[str, Any]]) -> None:
        nl = self.line_ending
        for message in messages:
            self.event_id += 1
            text = json.dumps(message, indent=1).replace("\n", f"{nl}data: ")  # multi-line data
            frame = (
                f": keep-alive{nl}id: {self.event_id}{nl}retry: 500{nl}event: message{nl}data: {text}{nl}{nl}"
            )
            data = frame.encode()
            step = self.chunk_bytes or len(data)
            for start in range(0, len(data), step):
                await self.body(data[start : start + step], more=True)


def rpc_result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def wait_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 port 0 for the block; yield its base URL."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.2
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config))
        yield binds[0]
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def fake_hub(**options: Any) -> AsyncIterator[tuple[FakeHub, str]]:
    hub = FakeHub(**options)
    async with serving(hub) as url:
        yield hub, url


@asynccontextmanager
async def hung_hub() -> AsyncIterator[tuple[str, list[trio.SocketStream]]]:
    """A hub that accepts connections and then neither reads nor answers (a stopped process)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    held: list[trio.SocketStream] = []

    async def hold(stream: trio.SocketStream) -> None:
        held.append(stream)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, hold, listeners))
        yield f"http://127.0.0.1:{port}", held
        nursery.cancel_scope.cancel()

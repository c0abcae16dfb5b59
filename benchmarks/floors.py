"""The two floors of scenario 1, each a server in its own process.

``python -m benchmarks.floors mcp``: the MCP SDK's own cost. One low-level
`Server` with one tool that answers at once, with the input and output
schemas of the hub's `probe` tool and a canned result of the same shape,
served stateful through the SDK's session manager under `hypercorn.trio`.
It answers as one JSON body, as the hub answers a probe
(`sonde.hub.mcp_answers`); ``mcp-sse`` serves it with SSE instead.

``python -m benchmarks.floors ws``: the transport's cost. A plain ASGI
WebSocket at ``/ws/echo`` under `hypercorn.trio` (the hub serves its agent
socket straight from ASGI too) that sends every text frame back.

Each prints its base URL on stdout and serves until stdin closes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import mcp_types as types
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from sonde.hub.tools.probe import ProbeInput, ProbeOutput

NOOP_TOOL = "noop"
WS_PATH = "/ws/echo"
CANNED_OUTPUT = ProbeOutput(
    agent="bench-00000",
    agent_id="0" * 32,
    probe="bench.noop.echo",
    result={"text": "x"},
    duration_ms=0.05,
    truncated=False,
    redactions=0,
).model_dump(mode="json")


def noop_server() -> Server[Any]:
    tool = types.Tool(
        name=NOOP_TOOL,
        description="Answers at once with a canned probe result.",
        input_schema=ProbeInput.model_json_schema(),
        output_schema=ProbeOutput.model_json_schema(),
    )

    async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def on_call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="ok")], structured_content=CANNED_OUTPUT
        )

    return Server("bench-floor", on_list_tools=on_list_tools, on_call_tool=on_call_tool)


class McpFloorApp:
    """ASGI root: the lifespan runs the session manager; all HTTP goes to it."""

    def __init__(self, json_response: bool) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=noop_server(), json_response=json_response, stateless=False
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()  # lifespan.startup
            async with self.manager.run():
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
            await send({"type": "lifespan.shutdown.complete"})
        elif scope["type"] == "http":
            await self.manager.handle_request(scope, receive, send)


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo every text frame of a WebSocket at ``WS_PATH``; refuse anything else."""
    if scope["type"] == "lifespan":
        await receive()
        await send({"type": "lifespan.startup.complete"})
        await receive()
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] != WS_PATH:
        await send({"type": "websocket.close", "code": 1008})
        return
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while True:
        event = await receive()
        if event["type"] != "websocket.receive":
            return
        await send({"type": "websocket.send", "text": event.get("text")})


async def wait_stdin_closed() -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(4096):
            pass


async def serve_floor(kind: str) -> None:
    app: Any = echo_app if kind == "ws" else McpFloorApp(json_response=kind == "mcp")
    config = HypercornConfig()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(app, config, shutdown_trigger=shutdown.wait, task_status=task_status)
        )
        print(binds[0], flush=True)
        await wait_stdin_closed()
        shutdown.set()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("mcp", "mcp-sse", "ws"):
        sys.exit("usage: python -m benchmarks.floors mcp|mcp-sse|ws")
    trio.run(serve_floor, sys.argv[1])

"""The mcp SDK's own client, under trio, with our API key; and the initialize a raw client sends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def mcp_client(url: str, key: str, mode: str = "legacy") -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured content."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; return its error text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


def initialize_request(protocol: str, request_id: int = 0) -> dict[str, Any]:
    """The ``initialize`` a client speaking raw HTTP sends first."""
    params = {"protocolVersion": protocol, "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


async def open_raw_session(http: httpx2.AsyncClient, protocol: str) -> dict[str, str]:
    """initialize + initialized by hand on ``protocol``; the headers every later request of the
    session carries."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    opened = await http.post("/mcp", content=json.dumps(initialize_request(protocol)), headers=headers)
    assert opened.status_code == 200, opened.text
    headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": protocol}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", content=json.dumps(initialized), headers=headers)).status_code == 202
    return headers


def mcp_refusal(answer: Any, status: int, word: str) -> str:
    """The message of the hub's refusal of an ``/mcp`` request (an httpx response): ``status``,
    and a JSON-RPC error (what MCP clients read) naming ``word`` in its ``data.code``."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert (body["jsonrpc"], body["id"]) == ("2.0", None), body
    error = body["error"]
    assert isinstance(error["code"], int), error
    assert error["data"] == {"code": word}, error
    return str(error["message"])

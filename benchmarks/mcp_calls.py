"""The mcp SDK's own client under trio, as an MCP host would use it, with timed calls."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

CALL_TIMEOUT_S = 120.0
MAX_ERRORS_KEPT = 5


@asynccontextmanager
async def mcp_client(base_url: str, key: str | None = None, path: str = "/mcp") -> AsyncIterator[Client]:
    """One MCP session (the 2025-11-25 handshake, as Claude Code and the Inspector use today)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    http = httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_S)
    transport = streamable_http_client(f"{base_url}{path}", http_client=http)
    async with http, Client(transport, mode="legacy") as client:  # type: ignore[arg-type]
        yield client


class ToolFailed(Exception):
    """A tool answered with ``isError``; the message is its text."""


async def call(client: Client, tool: str, arguments: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Call ``tool``; its structured result, or `ToolFailed` with the tool's error text."""
    result = await client.call_tool(tool, arguments, **kwargs)
    if result.is_error:
        text = result.content[0].text if result.content else "(no text)"  # type: ignore[union-attr]
        raise ToolFailed(text)
    return result.structured_content or {}


async def timed_call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(milliseconds, structured result) of one call."""
    started = time.perf_counter()
    output = await call(client, tool, arguments)
    return (time.perf_counter() - started) * 1000, output


async def tool_names(client: Client) -> list[str]:
    listed = await client.list_tools()
    return [tool.name for tool in listed.tools]


@dataclass
class ErrorLog:
    """A count of failures and the first few messages."""

    count: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.first) < MAX_ERRORS_KEPT:
            self.first.append(message[:300])

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first_messages": self.first}

"""End to end: every MCP tool call leaves exactly one audit row, also one that never reaches a tool.

An unknown tool name (answered by our handler) and params the SDK refuses
(``arguments`` not an object, no ``name``) are on the record with the caller's key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.mcpclient import initialize_request, mcp_client
from tests.e2e.procs import RunningHub, running_hub

pytestmark = pytest.mark.e2e

PROTOCOL = "2025-11-25"


def call_rows(hub: RunningHub) -> list[dict[str, Any]]:
    """The ``mcp.call*`` audit rows, oldest first (read through the API: every entry flushed)."""
    with hub.client() as http:
        answer = http.get("/api/v1/audit", params={"action": "mcp.call", "limit": 1000})
    assert answer.status_code == 200, answer.text
    return sorted(answer.json()["entries"], key=lambda e: e["seq"])


def raw_session(http: httpx.Client, key: str) -> dict[str, str]:
    """Headers of a fresh MCP session, opened the way a raw HTTP client does."""
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
    }
    opened = http.post("/mcp", headers=headers, json=initialize_request(PROTOCOL))
    assert opened.status_code == 200, opened.text
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    done = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert done.status_code == 202, done.text
    return headers


async def test_unknown_tools_and_invalid_params_leave_one_audit_row_each(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        with hub.client() as http:
            key_id = http.get("/api/v1/api-keys").json()["keys"][0]["id"]
        before = len(call_rows(hub))
        async with mcp_client(hub.url, hub.admin_key) as client:
            unknown = await client.call_tool("rm_rf", {})
            assert unknown.is_error
            assert "Unknown tool 'rm_rf'" in unknown.content[0].text  # type: ignore[union-attr]
        rows = call_rows(hub)[before:]
        assert [(r["action"], r["outcome"], r["actor"]) for r in rows] == [("mcp.call", "not_found", key_id)]
        assert rows[0]["detail"]["tool"] == "rm_rf"

        with httpx.Client(base_url=hub.url, timeout=10) as http:
            headers = raw_session(http, hub.admin_key)
            for request_id, params in enumerate(
                [{"name": "probe", "arguments": [1, 2]}, {"arguments": {}}, {"name": "list_agents"}], 10
            ):
                body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
                answer = http.post("/mcp", headers=headers, json=body)
                assert answer.status_code == 200, answer.text
        rows = call_rows(hub)[before + 1 :]
        assert [(r["action"], r["outcome"]) for r in rows] == [
            ("mcp.call", "invalid"),
            ("mcp.call", "invalid"),
            ("mcp.call.list_agents", "ok"),
        ]
        assert [r["detail"].get("tool") for r in rows] == ["probe", None, "list_agents"]
        assert {r["actor"] for r in rows} == {key_id}

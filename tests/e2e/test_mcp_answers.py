"""End to end, the hub answers an MCP request as one JSON body unless it asked for progress.

The session's real `sonde hub` with its agents ``alpha`` and ``beta``, raw
HTTP on /mcp, and the SSE parser the bridge uses to read event streams.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
import trio

from sonde.bridge.sse import SSEParser
from tests.e2e.harness import SharedFleet, audit_rows, eventually
from tests.e2e.mcpclient import initialize_request, mcp_client

pytestmark = pytest.mark.e2e

PROTOCOL = "2025-06-18"
INITIALIZE = initialize_request(PROTOCOL)


class Session:
    """One MCP session on the hub, spoken by hand."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}

    async def post(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """POST one message; the answer's content type and the JSON-RPC messages it carried."""
        answer = await self.http.post("/mcp", content=json.dumps(body), headers=self.headers)
        assert answer.status_code in (200, 202), answer.text
        kind = answer.headers.get("content-type", "").partition(";")[0]
        if kind == "text/event-stream":
            events = SSEParser().feed(answer.content)
            return kind, [json.loads(e.data) for e in events if e.data.strip()]
        return kind, [answer.json()] if answer.content else []


async def open_session(http: httpx2.AsyncClient) -> tuple[Session, str, dict[str, Any]]:
    session = Session(http)
    answer = await http.post("/mcp", content=json.dumps(INITIALIZE), headers=session.headers)
    assert answer.status_code == 200, answer.text
    session.headers["mcp-session-id"] = answer.headers["mcp-session-id"]
    session.headers["mcp-protocol-version"] = PROTOCOL
    await session.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session, answer.headers["content-type"], answer.json()


def tool_call(
    request_id: int, tool: str, arguments: dict[str, Any], progress_token: str | None
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_requests_without_a_progress_token_are_answered_as_json(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with httpx2.AsyncClient(
        base_url=hub.url, headers={"Authorization": f"Bearer {hub.admin_key}"}, timeout=30
    ) as http:
        session, opened_as, opened = await open_session(http)
        assert opened_as.startswith("application/json")
        assert opened["result"]["serverInfo"]["name"]

        kind, messages = await session.post(
            tool_call(1, "probe", {"agent": "alpha", "probe": "system.memory.usage"}, None)
        )
        assert kind == "application/json"
        [answer] = messages
        assert answer["id"] == 1
        assert answer["result"]["isError"] is False
        assert answer["result"]["structuredContent"]["result"]["total_bytes"] > 0

        kind, messages = await session.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert kind == "application/json"
        assert {"probe", "health_check"} <= {tool["name"] for tool in messages[0]["result"]["tools"]}

        # a progress token on a tool that answers from the hub at once does not buy an event stream
        kind, messages = await session.post(tool_call(3, "list_agents", {}, "t3"))
        assert kind == "application/json"
        assert messages[0]["id"] == 3
        assert messages[0]["result"]["isError"] is False


async def test_calls_with_a_progress_token_stream_progress_over_sse_at_once(fleet: SharedFleet) -> None:
    """Three concurrent calls on a session that was opened by a JSON answer, each with its own stream."""
    hub = fleet.hub
    answers: dict[int, tuple[str, list[dict[str, Any]]]] = {}
    async with httpx2.AsyncClient(
        base_url=hub.url, headers={"Authorization": f"Bearer {hub.admin_key}"}, timeout=30
    ) as http:
        session, opened_as, _ = await open_session(http)
        assert opened_as.startswith("application/json")

        async def call(request_id: int) -> None:
            arguments = {"tags": [], "categories": ["system"]}
            answers[request_id] = await session.post(
                tool_call(request_id, "health_check", arguments, f"t{request_id}")
            )

        async with trio.open_nursery() as nursery:
            for request_id in (11, 12, 13):
                nursery.start_soon(call, request_id)

    for request_id, (kind, messages) in answers.items():
        assert kind == "text/event-stream"
        progress = [m for m in messages if m.get("method") == "notifications/progress"]
        assert progress, messages
        assert {m["params"]["progressToken"] for m in progress} == {f"t{request_id}"}
        assert messages[-1]["id"] == request_id
        assert messages[-1]["result"]["isError"] is False


async def test_the_sdk_client_in_its_default_auto_mode_works_with_progress(fleet: SharedFleet) -> None:
    """mcp 2.x's Client negotiates in ``mode="auto"`` (``server/discover`` first); every call still works."""
    hub = fleet.hub
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with mcp_client(hub.url, hub.admin_key, mode="auto") as client:
        assert client.server_info is not None
        assert client.server_info.name == "sonde"
        probed = await client.call_tool("probe", {"agent": "alpha", "probe": "system.memory.usage"})
        checked = await client.call_tool(
            "health_check", {"tags": [], "categories": ["system"]}, progress_callback=on_progress
        )
    assert not probed.is_error
    assert probed.structured_content is not None
    assert probed.structured_content["result"]["total_bytes"] > 0
    assert not checked.is_error
    assert progress  # the event stream carried the progress


async def test_a_session_ended_while_its_client_goes_mid_call_logs_no_error(fleet: SharedFleet) -> None:
    """DELETE of the session, then the caller's socket closed, its probe still running: the
    hub's "the client went" cancel meets a session gone. It logged an ASGI traceback per request
    (the SDK's streams raise anyio's closed-resource errors, not trio's)."""
    hub = fleet.hub
    headers = {"Authorization": f"Bearer {hub.admin_key}"}
    seen = len(hub.proc.lines)

    def cancelled_sleeps() -> int:
        rows = audit_rows(hub, "mcp.probe")
        return sum(
            row["outcome"] == "cancelled" and "e2e.sleep.long" in (row["detail"] or "") for row in rows
        )

    before = cancelled_sleeps()
    async with httpx2.AsyncClient(base_url=hub.url, headers=headers, timeout=30) as http:
        session, _, _ = await open_session(http)
        async with httpx2.AsyncClient(base_url=hub.url, headers=headers, timeout=30) as caller:
            async with trio.open_nursery() as nursery:
                arguments = {"agent": "alpha", "probe": "e2e.sleep.long"}
                body = json.dumps(tool_call(1, "probe", arguments, None))
                nursery.start_soon(
                    lambda: caller.post("/mcp", content=body, headers={**session.headers, **headers})
                )
                await trio.sleep(1.0)  # the probe is running on alpha
                ended = await http.delete("/mcp", headers=session.headers)
                assert ended.status_code == 200, ended.text
                nursery.cancel_scope.cancel()  # and the caller goes: its socket closes
    # the probe ran, and its cancel went all the way through the hub: only then is "nothing
    # logged" worth asserting
    await eventually(lambda: cancelled_sleeps() == before + 1)
    logged = hub.proc.lines[seen:]
    assert not [line for line in logged if "Error in ASGI" in line or "Traceback" in line], "\n".join(logged)

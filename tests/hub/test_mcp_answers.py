"""Choosing JSON or SSE per MCP request, and what a JSON-answered request cannot carry."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from sonde.hub.mcp_answers import _DropUnwired, plan_answer


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


PROGRESS_TOOLS = frozenset({"health_check"})


def call(request_id: object, tool: str, meta: object = None) -> dict[str, object]:
    params: dict[str, object] = {"name": tool, "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (call(7, "probe"), "7"),
        ({"jsonrpc": "2.0", "id": "a-1", "method": "tools/list"}, "a-1"),
        (call(3, "health_check"), "3"),
        (call(3, "health_check", {}), "3"),
        (call(3, "health_check", {"progressToken": None}), "3"),
        # asks a tool that reports progress for it: SSE
        (call(3, "health_check", {"progressToken": 1}), None),
        (call(3, "health_check", {"progressToken": "p"}), None),
        # asks for progress a tool never sends: JSON all the same
        (call(3, "probe", {"progressToken": 1}), "3"),
        ({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {"progressToken": 1}}}, "4"),
        # not a request, or not one the SDK will take: its own path
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, None),
        ({"jsonrpc": "2.0", "id": 3, "result": {}}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []}, None),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": "x"}}, None),
        ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], None),
    ],
)
def test_plan_answer(message: Any, expected: str | None) -> None:
    plan = plan_answer(body(message), PROGRESS_TOOLS)
    assert (plan.request_id if plan is not None and plan.as_json else None) == expected


def test_plan_answer_keeps_the_id_of_a_request_answered_over_sse() -> None:
    plan = plan_answer(body(call(3, "health_check", {"progressToken": 1})), PROGRESS_TOOLS)
    assert plan is not None
    assert (plan.request_id, plan.wire_id, plan.as_json) == ("3", 3, False)


def test_plan_answer_leaves_bodies_that_are_not_json_to_the_sdk() -> None:
    assert plan_answer(b"{not json", PROGRESS_TOOLS) is None
    assert plan_answer(b"\xff\xfe", PROGRESS_TOOLS) is None


def related(message: Any, request_id: int | str) -> SessionMessage:
    return SessionMessage(message, metadata=ServerMessageMetadata(related_request_id=request_id))


async def test_notifications_of_json_answered_requests_are_dropped_their_answers_are_not() -> None:
    send, receive = anyio.create_memory_object_stream[SessionMessage](10)
    stream = _DropUnwired(send, json_requests={"1"})
    progress = JSONRPCNotification(
        jsonrpc="2.0", method="notifications/progress", params={"progressToken": 1}
    )
    async with stream:
        await stream.send(related(progress, 1))  # answered as JSON: no wire for it
        await stream.send(related(progress, 2))  # answered over SSE
        await stream.send(SessionMessage(progress))  # tied to no request
        await stream.send(related(JSONRPCResponse(jsonrpc="2.0", id=1, result={}), 1))
    async with receive:
        passed = [item async for item in receive]
    assert [
        (type(item.message).__name__, getattr(item.metadata, "related_request_id", None)) for item in passed
    ] == [
        ("JSONRPCNotification", 2),
        ("JSONRPCNotification", None),
        ("JSONRPCResponse", 1),
    ]

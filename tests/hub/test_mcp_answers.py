"""Choosing JSON or SSE per MCP request, and what a JSON-answered request cannot carry."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
import trio
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCResponse

from sonde.hub.mcp_answers import _DropUnwired, plan_answer, takes_event_stream


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


def waits(tool: str, arguments: Any) -> bool:
    """Which calls wait on agents: health_check and probe always, query_logs unless of the audit trail."""
    if tool == "query_logs":
        return (arguments or {}).get("source") != "audit"
    return tool in ("health_check", "probe")


def call(request_id: object, tool: str, meta: object = None, arguments: object = None) -> dict[str, object]:
    params: dict[str, object] = {"name": tool, "arguments": arguments or {}}
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
        (call(3, "health_check", {"progressToken": True}), "3"),  # no token: nothing to report on
        # asks for progress on a call that waits on agents: SSE (headers at once, keepalives)
        (call(3, "health_check", {"progressToken": 1}), None),
        (call(3, "health_check", {"progressToken": "p"}), None),
        (call(3, "probe", {"progressToken": 1}), None),
        (call(3, "query_logs", {"progressToken": 1}, {"source": "systemd"}), None),
        # a call that answers from the hub: JSON all the same
        (call(3, "list_agents", {"progressToken": 1}), "3"),
        (call(3, "query_logs", {"progressToken": 1}, {"source": "audit"}), "3"),
        (
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {"name": 5, "_meta": {"progressToken": 1}},
            },
            "3",
        ),
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
    plan = plan_answer(body(message), waits)
    assert (plan.request_id if plan is not None and plan.as_json else None) == expected


def test_plan_answer_keeps_the_id_of_a_request_answered_over_sse() -> None:
    plan = plan_answer(body(call(3, "health_check", {"progressToken": 1})), waits)
    assert plan is not None
    assert (plan.request_id, plan.wire_id, plan.as_json) == ("3", 3, False)


def test_plan_answer_answers_a_client_that_takes_no_event_stream_as_json() -> None:
    plan = plan_answer(body(call(3, "health_check", {"progressToken": 1})), waits, accepts_sse=False)
    assert plan is not None
    assert plan.as_json


@pytest.mark.parametrize(
    ("accept", "takes"),
    [
        ("application/json, text/event-stream", True),
        ("text/event-stream;q=0.9", True),
        ("TEXT/*", True),
        ("*/*", True),
        ("application/json", False),
        ("", False),
        ("text/plain, application/*", False),
    ],
)
def test_takes_event_stream(accept: str, takes: bool) -> None:
    assert takes_event_stream(accept) is takes


def test_plan_answer_leaves_bodies_that_are_not_json_to_the_sdk() -> None:
    assert plan_answer(b"{not json", waits) is None
    assert plan_answer(b"\xff\xfe", waits) is None


def related(message: Any, request_id: int | str) -> SessionMessage:
    return SessionMessage(message, metadata=ServerMessageMetadata(related_request_id=request_id))


async def test_notifications_of_json_answered_requests_are_dropped_their_answers_are_not() -> None:
    send, receive = anyio.create_memory_object_stream[SessionMessage](10)
    running_on = {"2": trio.Event(), "1": trio.Event()}
    stream = _DropUnwired(send, json_requests={"1"}, running_on=running_on)
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
    assert (running_on["1"].is_set(), running_on["2"].is_set()) == (True, False)  # 1 was answered

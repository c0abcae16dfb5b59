"""The routing headers the bridge derives for a client on the per-request protocol (MCP 2026-07-28).

The hub (the mcp SDK's server) refuses a request whose headers disagree with
its body, so each derived header is checked against the SDK's own reader.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request, decode_header_value

from sonde.bridge import jsonrpc

VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(name: str) -> dict[str, Any]:
    params = {"name": name, "arguments": {}, "_meta": ENVELOPE}
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def lowercase(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


@pytest.mark.parametrize(
    "name",
    ["probe", "sondé", " padded ", "=?base64?cHJvYmU=?=", "tab\there", ""],
)
def test_a_tool_call_gets_headers_the_sdk_reads_back_as_its_body(name: str) -> None:
    message = call(name)
    assert jsonrpc.envelope_version(message) == VERSION
    headers = jsonrpc.routing_headers(message, VERSION)
    assert decode_header_value(headers["Mcp-Name"]) == name
    assert isinstance(classify_inbound_request(message, headers=lowercase(headers)), InboundModernRoute)


def test_a_method_without_a_name_gets_version_and_method_only() -> None:
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}}
    headers = jsonrpc.routing_headers(discover, VERSION)
    assert headers == {"MCP-Protocol-Version": VERSION, "Mcp-Method": "server/discover"}
    assert isinstance(classify_inbound_request(discover, headers=lowercase(headers)), InboundModernRoute)


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {"progressToken": 1}}},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {"_meta": {jsonrpc.PROTOCOL_VERSION_META_KEY: 3}},
        },
        [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": ENVELOPE}}],
    ],
)
def test_a_message_without_its_own_version_has_none(message: Any) -> None:
    assert jsonrpc.envelope_version(message) is None

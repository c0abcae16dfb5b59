"""A request `/mcp` refuses for its Host or Origin is told what is wrong and what admits it.

The SDK's DNS-rebinding check answered ``Invalid Host header`` (421) or ``Invalid
Origin header`` (403) as a bare body with no Content-Type, and the hub's log said only
``mcp.server.transport_security: Invalid Host header: evil.example``. Now the answer is
the JSON error shape of every other refusal, naming the value and the ``--allowed-host``
that admits it; the hub's log says the same; and that advice, followed, works.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.e2e.mcpclient import initialize_request, mcp_refusal
from tests.e2e.procs import RunningHub, running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PROTOCOL = "2025-11-25"


def initialize(hub: RunningHub, **extra: str) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {hub.admin_key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        **extra,
    }
    body = json.dumps(initialize_request(PROTOCOL))
    return httpx.post(f"{hub.url}/mcp", content=body, headers=headers, timeout=10)


def refusal(answer: httpx.Response, status: int, word: str) -> str:
    """The message of a refusal, a JSON-RPC error (`mcp_refusal`) with the hub's headers."""
    assert answer.headers["x-content-type-options"] == "nosniff"
    return mcp_refusal(answer, status, word)


def test_a_refused_host_or_origin_is_answered_and_logged_with_the_allowed_host_that_admits_it(
    tmp_path: Path,
) -> None:
    for each in ("strict", "allowing"):
        (tmp_path / each).mkdir()
    with running_hub(tmp_path / "strict") as hub:
        host = refusal(initialize(hub, Host="Evil.Example"), 421, "host_not_allowed")
        assert "the Host header 'Evil.Example' is not a name this hub answers to" in host
        assert "--allowed-host evil.example" in host
        behind = refusal(initialize(hub, Host="hub.example.com:8443"), 421, "host_not_allowed")
        assert "--allowed-host hub.example.com:8443" in behind  # the port the clients use
        origin = refusal(initialize(hub, Origin="http://evil.example"), 403, "origin_not_allowed")
        assert "the Origin header 'http://evil.example' is not this hub's" in origin
        assert "--allowed-host evil.example" in origin
        odd = refusal(initialize(hub, Origin="null"), 403, "origin_not_allowed")
        assert "names no host --allowed-host could admit" in odd
        hub.proc.wait_for(
            re.compile(
                r"WARNING +sonde\.hub\.asgi: refused an MCP request from 127\.0\.0\.1: the Host header "
                r"'Evil\.Example' .* start the hub with --allowed-host evil\.example"
            )
        )
        assert initialize(hub).status_code == 200  # the hub's own address is fine
    assert "Invalid Host header" not in hub.proc.output  # the SDK's line, which said nothing of the fix

    # the advice, followed
    with running_hub(tmp_path / "allowing", "--allowed-host", "evil.example") as hub:
        assert initialize(hub, Host="evil.example").status_code == 200
        assert initialize(hub, Origin="http://evil.example").status_code == 200

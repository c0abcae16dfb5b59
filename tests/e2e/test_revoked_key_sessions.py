"""A revoked API key's open MCP sessions end within seconds, on a real hub.

Before, they stayed open until the 30-minute idle timeout (or for good, while their client
held an event stream): a revoked key kept its place among the hub's sessions, and its live
stream went on receiving. `sonde hub key revoke` changes only the database file; the hub
reads which keys holding sessions were revoked every `REVOKED_CHECK_EVERY_S`.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from sonde.hub.auth import KEY_CACHE_TTL_S
from sonde.hub.mcp_sessions import REVOKED_CHECK_EVERY_S
from tests.e2e.harness import eventually
from tests.e2e.mcpclient import initialize_request
from tests.e2e.procs import running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

PROTOCOL = "2025-06-18"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def open_session(http: httpx.AsyncClient) -> dict[str, str]:
    """initialize + initialized; the headers every later request of the session carries."""
    opened = await http.post("/mcp", content=json.dumps(initialize_request(PROTOCOL)), headers=ACCEPT)
    assert opened.status_code == 200, opened.text
    headers = ACCEPT | {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
    initialized = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (await http.post("/mcp", content=initialized, headers=headers)).status_code == 202
    return headers


async def test_a_revoked_keys_sessions_end_within_seconds(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        created = hub.cli("hub", "key", "create", "--name", "leaving")
        assert created.returncode == 0, created.stderr
        secret = created.stdout.strip()
        auth = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(base_url=hub.url, headers=auth, timeout=30) as http:
            idle = await open_session(http)
            streaming = await open_session(http)
            get = {**streaming, "Accept": "text/event-stream"}
            async with http.stream("GET", "/mcp", headers=get) as stream:
                assert stream.status_code == 200
                revoked = hub.cli("hub", "key", "revoke", secret)
                assert revoked.returncode == 0, revoked.stderr
                took = trio.current_time()
                with trio.fail_after(KEY_CACHE_TTL_S + 2 * REVOKED_CHECK_EVERY_S):
                    async for _ in stream.aiter_raw():  # the hub ends the stream with the session
                        pass
                took = trio.current_time() - took
            await eventually(lambda: "was revoked: ending its" in hub.proc.output, timeout_s=5)
            ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
            assert (await http.post("/mcp", json=ping, headers=idle)).status_code == 401
    said = [line for line in hub.proc.lines if "was revoked: ending its" in line]
    assert len(said) == 1, said
    assert "ending its 2 open MCP sessions" in said[0], said
    assert took < KEY_CACHE_TTL_S + 2 * REVOKED_CHECK_EVERY_S

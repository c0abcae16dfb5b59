"""A notification that races its session's end (DELETE) is no error of the hub's.

Regression (a soak): the Python SDK's client, leaving a session with a call cancelled, sends
``notifications/cancelled`` and ``DELETE`` at once. The SDK's server answered the notification
202, then found the session gone: it logged ``Error handling POST request`` with a traceback
and sent a 500 after the 202, which hypercorn logged as ``Error in ASGI Framework``: 67 lines
a time, 83 % of the soak's hub log.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest
import trio

from tests.e2e.mcpclient import open_raw_session
from tests.e2e.procs import running_hub

pytestmark = pytest.mark.e2e

PROTOCOL = "2025-06-18"
ROUNDS = 40


async def test_a_notification_racing_its_sessions_delete_logs_no_error(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        auth = {"Authorization": f"Bearer {hub.admin_key}"}
        async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=30) as http:
            statuses: list[int] = []
            for round_ in range(ROUNDS):
                headers = await open_raw_session(http, PROTOCOL)
                cancelled = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": round_, "reason": "the client left"},
                }

                async def notify(
                    headers: dict[str, str] = headers, body: str = json.dumps(cancelled)
                ) -> None:
                    statuses.append((await http.post("/mcp", content=body, headers=headers)).status_code)

                async def end(headers: dict[str, str] = headers) -> None:
                    statuses.append((await http.delete("/mcp", headers=headers)).status_code)

                async with trio.open_nursery() as both:
                    both.start_soon(notify)
                    both.start_soon(end)
            await trio.sleep(0.5)
        log = hub.proc.output
    assert " ERROR " not in log, log[-4000:]
    assert set(statuses) <= {200, 202, 404}, statuses

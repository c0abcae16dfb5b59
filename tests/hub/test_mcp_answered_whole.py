"""A request answered whole as JSON, its client still there, is not then cancelled as if its
client had gone.

Regression: the hub marked an answer sent only once hypercorn's send returned, but hypercorn
tells the request's reader that the cycle is over (``http.disconnect``) as it takes the last
body. Every JSON answer was followed by a ``notifications/cancelled`` for its own id, and a
DEBUG line saying the client went before its answer.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx2
import pytest

from tests.e2e.mcpclient import open_raw_session
from tests.inprocess_hub import in_process_hub

pytestmark = pytest.mark.timeout(60)


async def test_an_answer_sent_whole_is_not_cancelled_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sonde.hub.mcp_answers")
    async with in_process_hub(tmp_path) as url:
        key = (tmp_path / "first-admin-key").read_text().strip()
        async with httpx2.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as http:
            headers = await open_raw_session(http, "2025-06-18")
            for request_id in range(2, 7):
                listed = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
                answer = await http.post("/mcp", content=json.dumps(listed), headers=headers)
                assert answer.headers["content-type"].startswith("application/json")
                assert answer.json()["id"] == request_id
            called = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "list_agents"}}
            answer = await http.post("/mcp", content=json.dumps(called), headers=headers)
            assert answer.json()["result"]["isError"] is False
    said = [r.getMessage() for r in caplog.records if r.name == "sonde.hub.mcp_answers"]
    assert not [line for line in said if "went before its answer" in line], said

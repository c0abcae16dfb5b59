"""A POST to `/mcp` with another Content-Type than JSON is told which one it needs, in JSON.

The SDK refuses it before anything else with 400 and the bare text ``Invalid Content-Type
header`` (no Content-Type of its own), where every other refusal on `/mcp` is JSON. Now
the answer is the hub's JSON error shape, still 400, naming the header the request must
send and the one it sent. The SDK's refusal of an Accept header (406) is JSON already
(a JSON-RPC error naming the media types to accept): it stays as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.e2e.mcpclient import initialize_request
from tests.e2e.procs import running_hub
from tests.e2e.test_mcp_rebinding_answers import PROTOCOL, initialize, refusal

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

NEEDED = "send it with Content-Type: application/json"


def test_a_post_that_is_not_json_is_told_the_content_type_mcp_needs(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        said = refusal(initialize(hub, **{"Content-Type": "text/plain"}), 400, "invalid_content_type")
        assert NEEDED in said, said
        assert "this request's Content-Type was 'text/plain'" in said, said
        bare = httpx.post(
            f"{hub.url}/mcp",
            content=json.dumps(initialize_request(PROTOCOL)),
            headers={"Authorization": f"Bearer {hub.admin_key}", "Accept": "application/json"},
            timeout=10,
        )
        said = refusal(bare, 400, "invalid_content_type")
        assert NEEDED in said, said
        assert "this request sent none" in said, said
        accept = initialize(hub, Accept="text/html")
        assert accept.status_code == 406, accept.text
        assert accept.headers["content-type"] == "application/json"
        assert "Client must accept" in accept.json()["error"]["message"]
        assert initialize(hub, **{"Content-Type": "application/json; charset=utf-8"}).status_code == 200


def test_a_batch_is_refused_in_words_and_opens_no_session(tmp_path: Path) -> None:
    """The SDK answered a JSON-RPC batch with pydantic's four validation errors (-32602), with an
    ``Mcp-Session-Id`` for a session nothing could use."""
    with running_hub(tmp_path) as hub:
        for body in (f"[{json.dumps(initialize_request(PROTOCOL))}]", ' \n[{"jsonrpc": "2.0", "id": 1}]'):
            answer = httpx.post(
                f"{hub.url}/mcp",
                content=body,
                headers={
                    "Authorization": f"Bearer {hub.admin_key}",
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                },
                timeout=10,
            )
            assert answer.status_code == 400, answer.text
            assert "mcp-session-id" not in answer.headers
            error = answer.json()["error"]
            assert error["code"] == -32600, error
            assert error["message"].startswith("JSON-RPC batches are not supported"), error
        assert initialize(hub).status_code == 200

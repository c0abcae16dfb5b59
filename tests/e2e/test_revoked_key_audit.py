"""A revoked API key still in use is named (by id, never its text) in the audit row of its
refusal, on /mcp and on REST, and its holder is told the key was revoked.

Regression: both rows read `anonymous ... denied {"client": ...}`, as for any unknown text,
so nobody could find who still used the revoked key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import audit_rows
from tests.e2e.mcpclient import initialize_request, mcp_refusal
from tests.e2e.procs import running_hub, wait_until

pytestmark = pytest.mark.e2e

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def denied(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(r["actor"], json.loads(r["detail"])) for r in rows if r["outcome"] == "denied"]


def test_a_revoked_key_in_use_is_named_in_the_audit(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        created = hub.cli("hub", "key", "create", "--name", "leaky")
        assert created.returncode == 0, created.stderr
        secret = created.stdout.strip()
        found = re.search(r"API key ([0-9a-f]{32})", created.stderr)
        assert found is not None, created.stderr
        key_id = found.group(1)
        with hub.client(secret) as http:
            assert http.get("/api/v1/agents").status_code == 200
        revoked = hub.cli("hub", "key", "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr

        with hub.client(secret) as http:  # the hub's cache of keys lets it go within 5 s
            wait_until(lambda: http.get("/api/v1/agents").status_code == 401, interval=0.5)
            rest = http.get("/api/v1/agents")
        with httpx.Client(base_url=hub.url, timeout=10) as http:
            mcp = http.post(
                "/mcp",
                json=initialize_request("2025-06-18"),
                headers={**MCP_HEADERS, "Authorization": f"Bearer {secret}"},
            )
        assert rest.status_code == 401
        assert rest.json()["error"]["code"] == "unauthorized"
        assert rest.json()["error"]["message"].startswith("this API key was revoked at "), rest.text
        assert mcp_refusal(mcp, 401, "unauthorized").startswith("this API key was revoked at ")
        with hub.client("sonde_" + "Q" * 43) as http:  # text of no key: recorded as before
            assert http.get("/api/v1/agents").status_code == 401

        named = {"keyId": key_id, "reason": "key revoked"}
        wait_until(lambda: len(audit_rows(hub, "mcp.auth")) == 1)
        assert denied(audit_rows(hub, "mcp.auth")) == [
            ("anonymous", {"client": "127.0.0.1", "path": "/mcp", **named})
        ]
        unknown = ("anonymous", {"client": "127.0.0.1"})
        wait_until(lambda: unknown in denied(audit_rows(hub, "rest.auth")))
        rest_rows = denied(audit_rows(hub, "rest.auth"))
        assert rest_rows[-1] == unknown
        assert rest_rows[:-1]  # each refusal while the key was polled for, and the one after
        assert all(row == ("anonymous", {"client": "127.0.0.1", **named}) for row in rest_rows[:-1])
        with hub.client() as admin:
            served = admin.get("/api/v1/audit", params={"limit": 1000}).text
        assert secret not in served

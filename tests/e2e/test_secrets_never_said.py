"""A Sonde API key pasted into a tool's free text, a probe's parameters or a tag is never said
back in an answer, nor written to an audit row (README: "never repeated in a message or an
audit row, wherever it was given").

Regression: a review found a diagnose ``description``, a probe's ``params`` and a tag kept
whole in the audit log, and the tag said back in health_check's refusal.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.e2e.harness import SharedFleet, audit_rows, eventually
from tests.e2e.mcpclient import call, call_error, mcp_client

pytestmark = pytest.mark.e2e


def key_shaped() -> str:
    return "sonde_" + secrets.token_urlsafe(32)


async def test_a_key_in_a_description_params_or_tags_is_hidden_everywhere(fleet: SharedFleet) -> None:
    hub = fleet.hub
    in_description, in_params, in_param_name, in_tag = (key_shaped() for _ in range(4))
    async with mcp_client(hub.url, hub.admin_key) as client:
        await call(
            client, "diagnose", agent="alpha", category="system", description=f"my key {in_description} broke"
        )
        refused = await call_error(
            client,
            "probe",
            agent="alpha",
            probe="e2e.echo.value",
            params={"value": in_params, in_param_name: 1},
        )
        no_agent = await call_error(client, "health_check", tags=[in_tag])
    for said in (refused, no_agent):
        assert not any(key in said for key in (in_params, in_param_name, in_tag)), said
    assert "sonde_[hidden]" in no_agent

    def rows(action: str) -> list[dict[str, object]]:
        return [json.loads(row["detail"]) for row in audit_rows(hub, action)]

    # this test's rows among the shared fleet's (other tests diagnose and probe e2e.echo.value too)
    def described() -> list[object]:
        return [d["description"] for d in rows("mcp.diagnose") if "my key" in str(d.get("description"))]

    def sent() -> list[object]:
        return [
            d["params"]
            for d in rows("mcp.probe")
            if d.get("probe") == "e2e.echo.value" and "sonde_[hidden]" in json.dumps(d.get("params"))
        ]

    await eventually(lambda: bool(described() and sent()))
    assert described() == ["my key sonde_[hidden] broke"]
    assert sent() == [{"value": "sonde_[hidden]", "sonde_[hidden]": 1}]
    written = json.dumps(
        [audit_rows(hub, action) for action in ("mcp.diagnose", "mcp.probe", "mcp.call.health_check")]
    )
    for key in (in_description, in_params, in_param_name, in_tag):
        assert key[:12] not in written  # neither whole nor cut short

"""A register the hub cannot parse names the agent whose id it claims, in the log line (and its
id in the audit row's detail).

Regression (found by an upgrade review with a new agent on an old hub): a register with a field
the hub does not know, or a protocol version it does not speak, was refused as
`refused agent connection from 127.0.0.1: unknown field 'payload.linkKey'`, with an audit row
whose target was empty, so nobody could tell which agent needed the hub upgraded. A frame that
does not parse cannot have its signature checked, so the id is recorded as claimed, and the
reject stays unbound (it echoes no nonce: that would vouch for a register never checked).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
import trio

from sonde.protocol.messages import HubReject
from sonde.protocol.signing import sign_frame
from tests.e2e.harness import SharedFleet, agent_rows, audit_rows, eventually, send_register
from tests.security.attack_fleet import Identity, enroll_identity, unique_name

pytestmark = pytest.mark.e2e

UNKNOWN_FIELD = "unknown field 'payload.futureField'"
VERSION_2 = "unsupported protocol version 2; supported: 1..1"


def resigned(
    identity: Identity, change: Callable[[dict[str, Any]], None], agent_id: str | None = None
) -> str:
    """A fresh register of ``identity`` (as ``agent_id`` if given), changed, then signed again."""
    frame: dict[str, Any] = json.loads(identity.register())
    frame.pop("sig")
    if agent_id is not None:
        frame["agentId"] = agent_id
    change(frame)
    return json.dumps(sign_frame(frame, identity.key))


def with_future_field(frame: dict[str, Any]) -> None:
    frame["payload"]["futureField"] = "from a newer agent"


def as_version_2(frame: dict[str, Any]) -> None:
    frame["v"] = 2


async def refused_unbound(fleet: SharedFleet, frame: str, code: str, reason: str) -> None:
    answer = await send_register(fleet.hub.url, frame)
    assert isinstance(answer.first, HubReject), answer
    assert (answer.first.payload.code, answer.first.payload.reason) == (code, reason)
    assert answer.first.payload.supported_versions is not None
    assert (answer.first.agent_id, answer.close_code) == (None, 1008)  # unbound: nothing was checked
    assert answer.first.nonce != json.loads(frame)["nonce"]


async def denied_row(fleet: SharedFleet, claimed: str) -> dict[str, Any]:
    def rows() -> list[dict[str, Any]]:
        found = audit_rows(fleet.hub, "agent.connect")
        return [row for row in found if json.loads(row["detail"] or "{}").get("claimedId") == claimed]

    await eventually(lambda: bool(rows()))
    (row,) = rows()
    return row


@pytest.mark.parametrize(
    ("change", "code", "reason"),
    [(with_future_field, "protocol_error", UNKNOWN_FIELD), (as_version_2, "unsupported_version", VERSION_2)],
    ids=["unknown-field", "version-2"],
)
async def test_an_unparsable_register_names_the_enrolled_agent_it_claims(
    fleet: SharedFleet, change: Callable[[dict[str, Any]], None], code: str, reason: str
) -> None:
    identity = enroll_identity(fleet.hub, unique_name("newer"))
    with trio.fail_after(30):
        await refused_unbound(fleet, resigned(identity, change), code, reason)
        line = (
            rf"refused agent connection from 127\.0\.0\.1 \(claims agent {identity.name}'s id "
            rf"{identity.agent_id}\): {re.escape(reason)}$"
        )
        await trio.to_thread.run_sync(fleet.hub.proc.wait_for, re.compile(line))
        row = await denied_row(fleet, identity.agent_id)
    # unchecked, and its text the frame's (a field name of the sender's choosing): never filed
    # under the agent, in the audit log or as its last refusal, which MCP callers read (a review
    # planted "unknown field 'NOTE TO ASSISTANT: ...'" there for an agent that was offline)
    assert (row["actor"], row["target"], row["outcome"]) == ("agent", None, "denied")
    assert json.loads(row["detail"]) == {
        "peer": "127.0.0.1",
        "reason": reason,
        "claimedId": identity.agent_id,
    }
    assert agent_rows(fleet.hub)[identity.name].get("last_refusal") is None


async def test_an_unparsable_register_claiming_an_unknown_id_says_so(fleet: SharedFleet) -> None:
    identity = enroll_identity(fleet.hub, unique_name("stranger"))
    stranger_id = "f" * 32
    with trio.fail_after(30):
        frame = resigned(identity, with_future_field, agent_id=stranger_id)
        await refused_unbound(fleet, frame, "protocol_error", UNKNOWN_FIELD)
        line = (
            rf"refused agent connection from 127\.0\.0\.1 \(claims agent id {stranger_id}, "
            rf"which is not enrolled here\): {re.escape(UNKNOWN_FIELD)}$"
        )
        await trio.to_thread.run_sync(fleet.hub.proc.wait_for, re.compile(line))
        row = await denied_row(fleet, stranger_id)
    assert (row["actor"], row["target"], row["outcome"]) == ("agent", None, "denied")

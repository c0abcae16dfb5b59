"""Clock skew against a real hub: a gap that opens on a live link, then the refused reconnects.

The agent here is a raw socket speaking the protocol with the real codec (it stamps its
frames with a clock 5 minutes ahead, as after an NTP step), so no faketime is needed.
Regressions: the hub dropped every skewed frame but counted each as a sign of life, so
the agent stayed "online" while every probe timed out, forever; the refused reconnects
left no trace an operator could see (last_seen null, "has never connected").
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
import trio
import trio_websocket

from sonde.protocol.codec import parse_frame
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import AgentHeartbeat, HubReject, ProbeRequest, utc_now
from tests.e2e.harness import SharedFleet, agent_rows, agent_socket, eventually, register_frame, status_of
from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.security.attack_fleet import enroll_identity, raw_agent, unique_name

pytestmark = pytest.mark.e2e

AHEAD = (
    "the agent's clock is 300 s ahead of the hub's (window ±120 s): clocks disagree (is NTP running on both?)"
)
FAST_S = 5.0  # well inside the 30 s probe timeout the caller would otherwise wait out


async def test_a_clock_gap_on_a_live_link_takes_the_agent_offline_at_once(fleet: SharedFleet) -> None:
    hub = fleet.hub
    identity = enroll_identity(hub, unique_name("skewed"))
    errors: list[tuple[float, str]] = []
    closes: list[trio_websocket.CloseReason | None] = []
    async with mcp_client(hub.url, hub.admin_key) as client:

        async def probe() -> None:
            text = await call_error(client, "probe", agent=identity.name, probe="system.memory.usage")
            errors.append((trio.current_time(), text))

        with trio.fail_after(20):
            async with raw_agent(hub.url, identity) as agent, trio.open_nursery() as nursery:
                await eventually(lambda: status_of(hub, identity.name) == "online")
                nursery.start_soon(probe)
                assert isinstance(await agent.receive(), ProbeRequest)  # pending: never answered
                stepped = trio.current_time()
                await agent.send(AgentHeartbeat(ts=utc_now() + timedelta(seconds=300)))
                try:
                    await agent.ws.get_message()
                except trio_websocket.ConnectionClosed as closed:
                    closes.append(closed.reason)
    # the hub ended the link on the first skewed frame, and said why
    ((at, error),) = errors
    assert at - stepped < FAST_S, error
    assert AHEAD in error, error
    (close,) = closes
    assert close is not None
    assert (close.code, close.reason) == (1008, AHEAD)
    assert status_of(hub, identity.name) == "offline"
    assert re.search(rf"WARNING .*agent {identity.name} offline: {re.escape(AHEAD)}", hub.proc.output)


async def test_a_refused_reconnect_is_remembered_and_named(fleet: SharedFleet) -> None:
    hub = fleet.hub
    identity = enroll_identity(hub, unique_name("refused"))
    assert agent_rows(hub)[identity.name]["last_refusal"] is None

    # its reconnect, 5 minutes ahead: refused, with an answer bound to that very register
    frame = register_frame(
        identity.agent_id, identity.name, identity.key, ts=utc_now() + timedelta(seconds=300)
    )
    with trio.fail_after(10):
        async with agent_socket(hub.url) as ws:
            await ws.send_message(frame)
            reject, _ = parse_frame(await ws.get_message())
    assert isinstance(reject, HubReject)
    assert (reject.payload.code, reject.payload.reason) == (
        "bad_signature",
        f"register frame rejected: {AHEAD}",
    )
    sent = json.loads(frame)
    assert (reject.nonce, reject.agent_id) == (sent["nonce"], identity.agent_id)

    # REST, MCP and the probe error all name the refusal
    refusal: dict[str, Any] = agent_rows(hub)[identity.name]["last_refusal"]
    assert refusal["reason"] == f"register frame rejected: {AHEAD}"
    assert refusal["peer"] == "127.0.0.1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", refusal["at"])
    async with mcp_client(hub.url, hub.admin_key) as client:
        listed = await call(client, "list_agents", name=identity.name)
        assert listed["agents"][0]["last_refusal"] == refusal
        overview = await call(client, "agent_overview", agent=identity.name)
        assert overview["last_refusal"] == refusal
        error = await call_error(client, "probe", agent=identity.name, probe="system.memory.usage")
    assert (
        f"agent {identity.name} is offline: its last connection attempt, at {refusal['at']}, "
        f"was refused: register frame rejected: {AHEAD}"
    ) in error

    # once it gets in, the refusal is history
    async with raw_agent(hub.url, identity):
        await eventually(lambda: status_of(hub, identity.name) == "online")
        assert agent_rows(hub)[identity.name]["last_refusal"] is None


async def test_a_refusal_of_an_unknown_id_is_not_remembered(fleet: SharedFleet) -> None:
    """Only enrolled agents get an entry: the memory is bounded by the fleet, not by callers."""
    identity = enroll_identity(fleet.hub, unique_name("bounded"))
    frame = register_frame("0" * 32, identity.name, identity.key, exchange=LinkKeyExchange())
    with trio.fail_after(10):
        async with agent_socket(fleet.hub.url) as ws:
            await ws.send_message(frame)
            reject, _ = parse_frame(await ws.get_message())
    assert isinstance(reject, HubReject)
    assert reject.payload.code == "unknown_agent"
    assert agent_rows(fleet.hub)[identity.name]["last_refusal"] is None

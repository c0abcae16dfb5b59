"""A frame refused for its timestamp says which clock is ahead, and by how much.

Regression: the error said "frame timestamp is -300s from now" for an agent whose clock
was 5 minutes AHEAD (the sign of now - ts), on both sides.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import SignatureError
from sonde.protocol.messages import AgentHeartbeat, HubReject, RejectPayload
from sonde.protocol.signing import ReplayGuard, Side, StaleFrame, new_private_key

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NTP = "clocks disagree (is NTP running on both?)"


@pytest.mark.parametrize(
    ("peer", "peer_ahead_s", "says"),
    [
        ("agent", 300, f"the agent's clock is 300 s ahead of the hub's (window ±120 s): {NTP}"),
        ("agent", -300, f"the agent's clock is 300 s behind the hub's (window ±120 s): {NTP}"),
        ("hub", 300, f"the hub's clock is 300 s ahead of the agent's (window ±120 s): {NTP}"),
        ("hub", -86400, f"the hub's clock is 86400 s behind the agent's (window ±120 s): {NTP}"),
        (None, 121, f"the peer's clock is 121 s ahead of this machine's (window ±120 s): {NTP}"),
    ],
)
def test_a_stale_frame_names_the_clock_ahead(peer: Side | None, peer_ahead_s: float, says: str) -> None:
    guard = ReplayGuard(peer=peer)
    with pytest.raises(StaleFrame) as refused:
        guard.check("n", NOW + timedelta(seconds=peer_ahead_s), NOW)
    assert refused.value.code == "stale"
    assert refused.value.message == says
    assert refused.value.peer_ahead_s == peer_ahead_s


def test_inside_the_window_is_taken() -> None:
    guard = ReplayGuard(peer="agent")
    guard.check("early", NOW + timedelta(seconds=119), NOW)
    guard.check("late", NOW - timedelta(seconds=119), NOW)


def test_the_codec_hands_over_the_authentic_stale_frame() -> None:
    hub_key, agent_key = new_private_key(), new_private_key()
    agent_ahead = FrameCodec(
        signing_key=hub_key,
        peer_key=agent_key.public_key(),
        peer="agent",
        clock=lambda: datetime.now(UTC) - timedelta(seconds=300),
    )
    sender = FrameCodec(signing_key=agent_key, agent_id="a1")
    text = sender.encode(AgentHeartbeat())
    with pytest.raises(StaleFrame) as refused:
        agent_ahead.decode(text)
    assert refused.value.message.startswith("the agent's clock is 300 s ahead of the hub's")
    assert isinstance(refused.value.frame, AgentHeartbeat)
    assert refused.value.frame.agent_id == "a1"


def test_a_forged_stale_frame_fails_its_signature_first() -> None:
    hub_key, agent_key = new_private_key(), new_private_key()
    receiver = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), peer="hub")
    forged = FrameCodec(signing_key=new_private_key())  # not the hub's key
    old = HubReject(
        payload=RejectPayload(code="revoked", reason="x"), ts=datetime.now(UTC) - timedelta(hours=1)
    )
    with pytest.raises(SignatureError) as refused:
        receiver.decode(forged.encode(old))
    assert not isinstance(refused.value, StaleFrame)
    assert refused.value.code == "bad_signature"
    assert json.loads(forged.encode(old))["type"] == "hub.reject"

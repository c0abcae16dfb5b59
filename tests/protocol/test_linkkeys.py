"""Link keys: both ends agree, each direction has its own key, and a link frame needs the right one."""

from __future__ import annotations

import base64
import json
import re

import pytest

from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import SignatureError
from sonde.protocol.linkkeys import LinkKeyExchange, LinkKeys
from sonde.protocol.messages import (
    LINK_KEY_PATTERN,
    AgentHeartbeat,
    ProbeRequest,
    ProbeRequestPayload,
)
from sonde.protocol.signing import new_private_key


def linked_pair() -> tuple[FrameCodec, FrameCodec]:
    """A hub codec and an agent codec after a register/ack exchange."""
    hub_key, agent_key = new_private_key(), new_private_key()
    hub = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key())
    agent = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1")
    agent_half, hub_half = LinkKeyExchange(), LinkKeyExchange()
    agent.link_keys = agent_half.derive(hub_half.public_text, role="agent")
    hub.link_keys = hub_half.derive(agent_half.public_text, role="hub")
    return hub, agent


def probe_request() -> ProbeRequest:
    return ProbeRequest(payload=ProbeRequestPayload(request_id="r1", probe="system.memory.usage"))


def test_both_ends_derive_mirrored_keys_one_per_direction() -> None:
    agent_half, hub_half = LinkKeyExchange(), LinkKeyExchange()
    agent = agent_half.derive(hub_half.public_text, role="agent")
    hub = hub_half.derive(agent_half.public_text, role="hub")
    assert agent == LinkKeys(send=hub.receive, receive=hub.send)
    assert agent.send != agent.receive  # a frame cannot be reflected back to its sender
    assert len(agent.send) == len(agent.receive) == 32


def test_every_connection_gets_fresh_keys() -> None:
    hub_half = LinkKeyExchange()
    first = LinkKeyExchange().derive(hub_half.public_text, role="agent")
    second = LinkKeyExchange().derive(hub_half.public_text, role="agent")
    assert first.send != second.send


def test_public_key_text_matches_the_wire_pattern() -> None:
    assert re.fullmatch(LINK_KEY_PATTERN, LinkKeyExchange().public_text)


@pytest.mark.parametrize(
    ("peer", "words"),
    [
        ("not base64!", "not base64"),
        (base64.b64encode(b"short").decode(), "must be 32 bytes"),
        (base64.b64encode(bytes(32)).decode(), "not a usable"),  # a low-order point: no shared secret
    ],
)
def test_an_unusable_peer_key_is_refused(peer: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        LinkKeyExchange().derive(peer, role="hub")


def test_link_frames_round_trip_both_ways_with_an_hmac() -> None:
    hub, agent = linked_pair()
    text = hub.encode(probe_request())
    assert len(base64.b64decode(json.loads(text)["sig"])) == 32  # HMAC-SHA256, not a 64-byte Ed25519 sig
    assert agent.decode(text) == ProbeRequest.model_validate(json.loads(text))
    heartbeat = hub.decode(agent.encode(AgentHeartbeat()))
    assert isinstance(heartbeat, AgentHeartbeat)
    assert heartbeat.agent_id == "a1"


def test_a_link_refuses_ed25519_frames_other_links_altered_reflected_and_replayed_frames() -> None:
    hub, agent = linked_pair()
    ed25519_only = FrameCodec(signing_key=agent.signing_key, agent_id="a1")  # the right identity key
    other_hub, other_agent = linked_pair()
    genuine = agent.encode(AgentHeartbeat())
    altered = json.loads(genuine)
    altered["payload"]["probesInFlight"] = 7
    for frame, code in [
        (ed25519_only.encode(AgentHeartbeat()), "bad_signature"),
        (other_agent.encode(AgentHeartbeat()), "bad_signature"),
        (json.dumps(altered), "bad_signature"),
        (hub.encode(AgentHeartbeat()), "bad_signature"),  # our own frame sent back to us
        (json.dumps({**json.loads(genuine), "sig": None}), "unsigned"),
        (genuine[:-1] + ',"payload":{"probesInFlight":7}}', "bad_signature"),  # a key smuggled in after sig
        (json.dumps(json.loads(genuine)), "bad_signature"),  # the same object, dumped with spaces
        (json.dumps(dict(reversed(list(json.loads(genuine).items())))), "bad_signature"),  # sig not last
    ]:
        with pytest.raises(SignatureError) as refused:
            hub.decode(frame)
        assert refused.value.code == code
    hub.decode(genuine)
    with pytest.raises(SignatureError) as replayed:
        hub.decode(genuine)
    assert replayed.value.code == "replayed"
    assert other_hub.link_keys != hub.link_keys

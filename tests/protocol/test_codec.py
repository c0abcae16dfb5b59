"""Frames in, typed messages out; every kind of bad frame names what was wrong."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from sonde.protocol.codec import FrameCodec, parse_frame
from sonde.protocol.errors import RemoteProtocolError, SignatureError
from sonde.protocol.messages import (
    AgentHeartbeat,
    Attestation,
    ProbeErrorPayload,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
    ProbeResponsePayload,
    RegisterPayload,
    to_wire,
)
from sonde.protocol.signing import ReplayGuard, new_private_key, public_key_from_text, public_key_to_text


def request(**overrides: object) -> ProbeRequest:
    payload = ProbeRequestPayload(request_id="r1", probe="system.memory.usage", **overrides)  # type: ignore[arg-type]
    return ProbeRequest(payload=payload)


def codec_pair() -> tuple[FrameCodec, FrameCodec]:
    hub_key, agent_key = new_private_key(), new_private_key()
    hub = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key())
    agent = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1")
    return hub, agent


def test_wire_names_are_camel_case() -> None:
    wire = to_wire(request())
    assert set(wire) == {"v", "id", "type", "ts", "agentId", "nonce", "sig", "payload"}
    assert wire["payload"]["requestId"] == "r1"
    assert wire["payload"]["timeoutS"] == 30.0
    assert wire["type"] == "probe.request"


def test_round_trip_every_type_signed() -> None:
    hub, agent = codec_pair()
    sent = ProbeResponse(
        payload=ProbeResponsePayload(
            request_id="r1", probe="system.memory.usage", result={"x": 1}, duration_ms=2
        )
    )
    got = hub.decode(agent.encode(sent))
    assert isinstance(got, ProbeResponse)
    assert got.payload.result == {"x": 1}
    assert got.agent_id == "a1"
    beat = hub.decode(agent.encode(AgentHeartbeat()))
    assert isinstance(beat, AgentHeartbeat)


def test_messages_are_frozen_and_strict() -> None:
    message = request()
    with pytest.raises(ValidationError):
        message.payload.probe = "other.thing.x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ProbeRequestPayload(request_id="r1", probe="system.memory.usage", extra=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("text", "code", "fragment"),
    [
        ("{nope", "bad_json", "not valid JSON"),
        ("[1, 2]", "bad_frame", "JSON object"),
        (json.dumps({"v": 1, "type": "probe.nuke"}), "unknown_type", "probe.nuke"),
        (json.dumps({"v": 9, "type": "probe.request"}), "unsupported_version", "supported: 1..1"),
        (json.dumps({"type": "probe.request"}), "unsupported_version", "None"),
        (
            json.dumps(
                {"v": 1, "type": "probe.request", "id": "x", "ts": "2026-01-01T00:00:00Z", "nonce": "n"}
            ),
            "missing_field",
            "payload",
        ),
        (
            json.dumps({**to_wire(request()), "payload": {"requestId": "r1"}}),
            "missing_field",
            "probe",
        ),
        (
            json.dumps({**to_wire(request()), "bogus": 1}),
            "unknown_field",
            "bogus",
        ),
        (
            json.dumps({**to_wire(request()), "payload": {"requestId": "r1", "probe": "rm -rf /"}}),
            "invalid_field",
            "probe",
        ),
        (  # half a surrogate pair: SQLite, logs and hashes cannot encode it (found by the fuzzer)
            json.dumps({**to_wire(request()), "agentId": "\ud800"}),
            "bad_json",
            "lone UTF-16 surrogate",
        ),
        (
            json.dumps({**to_wire(request()), "nonce": "n\udfff"}).replace("\\udfff", "\\uDFFF"),
            "bad_json",
            "lone UTF-16 surrogate",
        ),
    ],
)
def test_bad_frames_name_what_is_wrong(text: str, code: str, fragment: str) -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        parse_frame(text)
    assert caught.value.code == code
    assert fragment in caught.value.message


def test_a_whole_surrogate_pair_and_an_escaped_backslash_are_fine() -> None:
    wire = to_wire(request())
    for text in ("\U0001f600", "C:\\udev\\uDrive"):  # an emoji (escaped as a pair); backslash, then "ud"
        payload = {**wire["payload"], "params": {"text": text}}
        message, raw = parse_frame(json.dumps({**wire, "payload": payload}))
        assert raw["payload"]["params"]["text"] == text
        assert isinstance(message, ProbeRequest)
        assert message.payload.params["text"] == text


def test_frame_larger_than_limit() -> None:
    text = json.dumps({**to_wire(request()), "padding": "x" * 2000})
    with pytest.raises(RemoteProtocolError) as caught:
        parse_frame(text, max_frame_bytes=1000)
    assert caught.value.code == "frame_too_large"
    # multi-byte text counts in bytes, not characters
    wide = json.dumps({"v": 1, "s": "é" * 600})
    with pytest.raises(RemoteProtocolError):
        parse_frame(wide, max_frame_bytes=1000)


def test_unsigned_frame_is_rejected() -> None:
    hub, _ = codec_pair()
    text = json.dumps(to_wire(request()))
    with pytest.raises(SignatureError, match="not signed"):
        hub.decode(text)


def test_stripped_signature_is_rejected() -> None:
    hub, agent = codec_pair()
    frame = json.loads(agent.encode(AgentHeartbeat()))
    frame.pop("sig")
    with pytest.raises(SignatureError):
        hub.decode(json.dumps(frame))


def test_altered_frame_is_rejected() -> None:
    hub, agent = codec_pair()
    frame = json.loads(agent.encode(request()))
    frame["payload"]["probe"] = "system.disk.usage"
    with pytest.raises(SignatureError, match="does not verify"):
        hub.decode(json.dumps(frame))


def test_wrong_key_is_rejected() -> None:
    hub, _ = codec_pair()
    stranger = FrameCodec(signing_key=new_private_key())
    with pytest.raises(SignatureError):
        hub.decode(stranger.encode(AgentHeartbeat()))


def test_replayed_frame_is_rejected() -> None:
    hub, agent = codec_pair()
    text = agent.encode(AgentHeartbeat())
    hub.decode(text)
    with pytest.raises(SignatureError, match="replay"):
        hub.decode(text)


def test_stale_and_future_frames_are_rejected() -> None:
    guard = ReplayGuard(window_s=60)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(SignatureError, match="window"):
        guard.check("a", now - timedelta(seconds=61), now)
    with pytest.raises(SignatureError, match="window"):
        guard.check("b", now + timedelta(seconds=61), now)
    guard.check("c", now - timedelta(seconds=59), now)


def test_replay_cache_forgets_old_nonces_and_is_bounded() -> None:
    guard = ReplayGuard(window_s=10, max_nonces=3)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(3):
        guard.check(f"n{i}", start, start)
    with pytest.raises(SignatureError, match="too many"):
        guard.check("n3", start, start)
    later = start + timedelta(seconds=11)
    guard.check("n4", later, later)  # the old ones aged out
    assert len(guard._seen) == 1


def test_public_key_text_round_trip_and_garbage() -> None:
    key = new_private_key().public_key()
    assert public_key_to_text(public_key_from_text(public_key_to_text(key))) == public_key_to_text(key)
    with pytest.raises(ValueError, match="32 bytes"):
        public_key_from_text("AAAA")


def test_register_payload_validates_names() -> None:
    attestation = Attestation(os="linux", kernel="6", agent_version="0.1.0", code_hash="h", packs={})
    base = {"hostname": "h", "os": "linux", "agent_version": "0.1.0", "packs": (), "attestation": attestation}
    RegisterPayload(name="web-1.prod", **base)  # type: ignore[arg-type]
    for bad in ["", "-x", "a b", "x" * 64, "a;rm"]:
        with pytest.raises(ValidationError):
            RegisterPayload(name=bad, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda wire: {**wire, "nonce": "n" * 1_000_000}, "nonce"),  # kept for the replay window
        (lambda wire: {**wire, "nonce": "a b"}, "nonce"),
        (lambda wire: {**wire, "id": "i" * 65}, "id"),
        (lambda wire: {**wire, "agentId": "a" * 65}, "agentId"),
    ],
)
def test_an_envelope_field_past_its_bound_is_refused(change: Any, field: str) -> None:
    """Regression (a hostile-agent review): a 1 MB nonce was accepted and remembered for the
    replay window, about 1 MiB of hub memory a frame."""
    with pytest.raises(RemoteProtocolError) as caught:
        parse_frame(json.dumps(change(to_wire(request()))))
    assert f"'{field}'" in str(caught.value)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    """Python's JSON reads them, JSON has not: passed on, they broke REST answers (the dashboard)."""
    text = json.dumps(to_wire(request())).replace('"timeoutS": 30.0', f'"timeoutS": {constant}')
    assert constant in text
    with pytest.raises(RemoteProtocolError) as caught:
        parse_frame(text)
    assert caught.value.code == "bad_json"


def test_an_error_code_is_a_word() -> None:
    with pytest.raises(ValidationError):
        ProbeErrorPayload(request_id="r1", code="x" * 300_000, message="m")
    with pytest.raises(ValidationError):
        ProbeErrorPayload(request_id="r1", code="Bad Code\x1b[2J", message="m")
    assert ProbeErrorPayload(request_id="r1", code="service_down", message="m").code == "service_down"


def test_what_an_agent_says_of_itself_is_bounded() -> None:
    """Regression (a hostile-agent review): a 450 KB `os` went whole into a log line at every
    connect, and 9,000 probes of one agent into every list_capabilities answer."""
    from sonde.packs.registry import load_packs
    from sonde.protocol.messages import PackDescriptor, RegisterPayload

    packs = [pack.descriptor() for pack in load_packs().packs.values()]
    claim = {"os": "linux", "kernel": "6.1", "agentVersion": "0.1.0", "codeHash": "sha256:a", "packs": {}}
    fields = {
        "name": "web-1",
        "hostname": "web-1",
        "os": "linux",
        "agentVersion": "0.1.0",
        "attestation": claim,
    }
    assert RegisterPayload.model_validate({**fields, "packs": packs}).packs  # every built-in pack fits
    for too_much in (
        {"os": "x" * 257},
        {"attestation": {**claim, "os": "x" * 450_000}},
        {"packs": [packs[0]] * 65},
    ):
        with pytest.raises(ValidationError):
            RegisterPayload.model_validate({**fields, "packs": packs, **too_much})
    probe = packs[0].probes[0]
    with pytest.raises(ValidationError):
        PackDescriptor(name="many", version="1", probes=(probe,) * 257)

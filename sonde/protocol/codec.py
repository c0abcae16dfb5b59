"""Text frame <-> typed message, with size, version, schema and signature checks.

`FrameCodec` is the only place frames are made and read. It signs what it
encodes with our key and, once the peer's key is known, verifies what it
decodes; errors name what was wrong so a person can act on them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from sonde.protocol.errors import RemoteProtocolError
from sonde.protocol.jsontext import escapes_lone_surrogate
from sonde.protocol.linkkeys import LinkKeys
from sonde.protocol.messages import (
    MAX_FRAME_BYTES,
    MESSAGE_ADAPTER,
    MESSAGE_TYPES,
    SUPPORTED_VERSIONS,
    Envelope,
    Message,
    to_wire,
    utc_now,
)
from sonde.protocol.signing import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
    ReplayGuard,
    Side,
    StaleFrame,
    mac_text,
    sign_frame,
    verify_frame,
    verify_mac_text,
)

SHOWN_VALUE_CHARS = 80  # a peer's value quoted in an error (and so in a reject, a log, the audit)


def no_constant(name: str) -> Any:
    """Refuse ``NaN``, ``Infinity`` and ``-Infinity``, which Python's JSON reads and JSON has
    not: passed on, they made the answers of REST (and the dashboard) JSON no parser takes."""
    raise ValueError(f"{name} is not JSON")


def parse_frame(text: str, max_frame_bytes: int = MAX_FRAME_BYTES) -> tuple[Message, dict[str, Any]]:
    """Decode and validate one text frame without checking its signature.

    Returns the typed message and the raw JSON object (for signature checks).
    Raises `RemoteProtocolError` naming what was wrong.
    """
    if len(text) > max_frame_bytes or (
        len(text) * 4 > max_frame_bytes and len(text.encode()) > max_frame_bytes
    ):
        raise RemoteProtocolError(
            "frame_too_large", f"frame is larger than the limit of {max_frame_bytes} bytes"
        )
    try:
        raw = json.loads(text, parse_constant=no_constant)
    except (ValueError, RecursionError) as exc:
        raise RemoteProtocolError("bad_json", f"frame is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise RemoteProtocolError("bad_frame", "frame must be a JSON object")
    if escapes_lone_surrogate(text, raw):
        raise RemoteProtocolError(
            "bad_json", "frame is not valid Unicode: it escapes a lone UTF-16 surrogate (\\ud800-\\udfff)"
        )
    check_version(raw.get("v"))
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in MESSAGE_TYPES:
        raise RemoteProtocolError("unknown_type", f"unknown message type {shown(kind)}")
    try:
        message = MESSAGE_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise RemoteProtocolError(*describe_validation_error(exc)) from None
    return message, raw


def check_version(v: object) -> None:
    low, high = SUPPORTED_VERSIONS
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise RemoteProtocolError(
            "unsupported_version", f"unsupported protocol version {shown(v)}; supported: {low}..{high}"
        )


def shown(value: object) -> str:
    """``repr(value)``, cut short: a peer must not make our errors as large as its frame."""
    return cut(repr(value))


def cut(text: str, limit: int = SHOWN_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """Turn a pydantic error into (code, message) naming the first bad field."""
    first = exc.errors()[0]
    where = cut(".".join(str(part) for part in first["loc"][1:] or first["loc"]), 4 * SHOWN_VALUE_CHARS)
    if first["type"] == "missing":
        return "missing_field", f"missing field {where!r}"
    if first["type"] == "extra_forbidden":
        return "unknown_field", f"unknown field {where!r}"
    return "invalid_field", f"invalid field {where!r}: {first['msg']}"


@dataclass
class FrameCodec:
    """Signs outgoing frames and checks incoming ones for one connection.

    Until ``link_keys`` is set, frames are signed with ``signing_key`` (Ed25519)
    and checked with ``peer_key``; ``peer_key`` None means incoming frames are
    not verified (only before the peer's identity is known). Once the register
    and ack have agreed ``link_keys`` (`sonde.protocol.linkkeys`), every frame
    both ways carries an HMAC by those keys instead. ``agent_id`` is stamped on
    every frame we send. ``peer`` (who sends what we decode) names the two clocks
    when a frame's timestamp is refused; ``clock`` is this side's clock (tests step it).
    """

    signing_key: Ed25519PrivateKey
    peer_key: Ed25519PublicKey | None = None
    agent_id: str | None = None
    max_frame_bytes: int = MAX_FRAME_BYTES
    link_keys: LinkKeys | None = None
    peer: Side | None = None
    clock: Callable[[], datetime] = utc_now
    replay_guard: ReplayGuard = field(init=False)

    def __post_init__(self) -> None:
        self.replay_guard = ReplayGuard(peer=self.peer)

    def encode(self, message: Envelope) -> str:
        """Stamp, sign and dump ``message`` as one text frame."""
        if self.agent_id is not None and message.agent_id != self.agent_id:
            message = message.model_copy(update={"agent_id": self.agent_id})
        wire = to_wire(message)
        if self.link_keys is not None:
            del wire["sig"]
            return mac_text(json.dumps(wire, separators=(",", ":"), ensure_ascii=False), self.link_keys.send)
        frame = sign_frame(wire, self.signing_key)
        return json.dumps(frame, separators=(",", ":"), ensure_ascii=False)

    def decode(self, text: str) -> Message:
        """Parse, validate and (once the peer key or the link keys are known) verify one frame.

        Raises `RemoteProtocolError`; a `SignatureError` when the frame fails its signature,
        MAC or replay check, a `StaleFrame` (carrying the authentic frame) when only its
        timestamp is outside the window.
        """
        message, raw = parse_frame(text, self.max_frame_bytes)
        if self.link_keys is not None:
            verify_mac_text(text, raw, self.link_keys.receive)
            self._check_fresh(message)
        elif self.peer_key is not None:
            verify_frame(raw, self.peer_key)
            self._check_fresh(message)
        return message

    def _check_fresh(self, message: Message) -> None:
        try:
            self.replay_guard.check(message.nonce, message.ts, self.clock())
        except StaleFrame as stale:
            stale.frame = message  # authentic (checked above): the caller may still answer it
            raise

"""Wire messages between agent and hub: frozen values, camelCase on the wire.

Every frame is an envelope ``{v, id, type, ts, agentId, nonce, sig, payload}``;
``type`` selects the payload model through a discriminated union.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, TypeAdapter
from pydantic.alias_generators import to_camel

from sonde.protocol.names import LOWER_WORD, NAME_PATTERN, PROBE_NAME_PATTERN

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS = (1, 1)  # inclusive range the hub accepts
MAX_FRAME_BYTES = 1024 * 1024

REQUEST_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# What an agent says of itself and of its packs is bounded, not only by the frame: a hostile
# agent's 1 MB nonce was kept for the replay window (about 1 MiB of hub memory a frame), its
# 450 KB `os` went whole into a log line at every connect, its 9,000 probes into every
# list_capabilities answer (a hostile-agent review). Real agents use a fraction of each bound.
NONCE_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # `new_nonce` makes 22 characters
ERROR_CODE_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
Word = Annotated[str, Field(max_length=64)]  # an id, a version
Text = Annotated[str, Field(max_length=256)]  # a host name, an OS, a kernel
Description = Annotated[str, Field(max_length=8192)]
MAX_PACKS = 64
MAX_PROBES_PER_PACK = 256
LINK_KEY_PATTERN = r"^[A-Za-z0-9+/]{43}=$"  # base64 of a 32-byte X25519 public key (sonde.protocol.linkkeys)


class WireModel(BaseModel):
    """Base of every wire model: frozen, strict about extra fields, camelCase aliases."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )


# --- payloads -------------------------------------------------------------


class ProbeDescriptor(WireModel):
    name: Annotated[str, Field(pattern=PROBE_NAME_PATTERN)]
    description: Description
    params_schema: dict[str, JsonValue]
    timeout_s: float


class PackDescriptor(WireModel):
    name: Annotated[str, Field(pattern=LOWER_WORD)]
    version: Word
    description: Description = ""
    categories: Annotated[tuple[Word, ...], Field(max_length=MAX_PACKS)] = ()
    probes: Annotated[tuple[ProbeDescriptor, ...], Field(max_length=MAX_PROBES_PER_PACK)] = ()


class Attestation(WireModel):
    """What the agent says about itself; the hub compares it to a baseline."""

    os: Text
    kernel: Text
    agent_version: Word
    code_hash: Text
    packs: Annotated[dict[Word, Word], Field(max_length=MAX_PACKS)]


LinkKeyText = Annotated[str, Field(pattern=LINK_KEY_PATTERN)]


class RegisterPayload(WireModel):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    hostname: Text
    os: Text
    os_version: Text = ""
    kernel: Text = ""
    arch: Word = ""
    agent_version: Word
    boot_time: float | None = None
    packs: Annotated[tuple[PackDescriptor, ...], Field(max_length=MAX_PACKS)]
    attestation: Attestation
    link_key: LinkKeyText | None = (
        None  # this connection's X25519 key; the hub refuses a register without one
    )


class AckPayload(WireModel):
    agent_id: str
    heartbeat_interval_s: Annotated[float, Field(gt=0, le=3600)]
    hub_version: str
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_probes_in_flight: int = 64
    link_key: LinkKeyText  # the hub's X25519 key for this connection


RejectCode = Literal[
    "unknown_agent",
    "revoked",
    "bad_signature",
    "unsupported_version",
    "protocol_error",
    "replaced",
    "hub_shutting_down",
]


class VersionRange(WireModel):
    min: int
    max: int


class RejectPayload(WireModel):
    code: RejectCode
    reason: str
    supported_versions: VersionRange | None = None


class HeartbeatPayload(WireModel):
    probes_in_flight: Annotated[int, Field(ge=0)] = 0


class ProbeRequestPayload(WireModel):
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    probe: Annotated[str, Field(pattern=PROBE_NAME_PATTERN)]
    params: dict[str, JsonValue] = Field(default_factory=dict)
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0


class ProbeMeta(WireModel):
    truncated: bool = False
    redactions: int = 0
    output_bytes: int = 0


class ProbeResponsePayload(WireModel):
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    probe: str
    result: dict[str, JsonValue]
    duration_ms: float
    meta: ProbeMeta = ProbeMeta()


class ProbeErrorPayload(WireModel):
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    code: Annotated[str, Field(pattern=ERROR_CODE_PATTERN)]
    message: str


class ProbeCancelPayload(WireModel):
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    reason: str = "cancelled"


# --- envelopes ------------------------------------------------------------


def new_message_id() -> str:
    return uuid.uuid4().hex


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


def utc_now() -> datetime:
    return datetime.now(UTC)


class Envelope(WireModel):
    v: int = PROTOCOL_VERSION
    id: Word = Field(default_factory=new_message_id)
    ts: AwareDatetime = Field(default_factory=utc_now)  # naive times cannot be compared with ours
    agent_id: Word | None = None
    nonce: Annotated[str, Field(pattern=NONCE_PATTERN)] = Field(default_factory=new_nonce)
    sig: Text | None = None


class AgentRegister(Envelope):
    type: Literal["agent.register"] = "agent.register"
    payload: RegisterPayload


class HubAck(Envelope):
    type: Literal["hub.ack"] = "hub.ack"
    payload: AckPayload


class HubReject(Envelope):
    type: Literal["hub.reject"] = "hub.reject"
    payload: RejectPayload


class AgentHeartbeat(Envelope):
    type: Literal["agent.heartbeat"] = "agent.heartbeat"
    payload: HeartbeatPayload = HeartbeatPayload()


class ProbeRequest(Envelope):
    type: Literal["probe.request"] = "probe.request"
    payload: ProbeRequestPayload


class ProbeResponse(Envelope):
    type: Literal["probe.response"] = "probe.response"
    payload: ProbeResponsePayload


class ProbeError(Envelope):
    type: Literal["probe.error"] = "probe.error"
    payload: ProbeErrorPayload


class ProbeCancel(Envelope):
    type: Literal["probe.cancel"] = "probe.cancel"
    payload: ProbeCancelPayload


Message = Annotated[
    AgentRegister
    | HubAck
    | HubReject
    | AgentHeartbeat
    | ProbeRequest
    | ProbeResponse
    | ProbeError
    | ProbeCancel,
    Field(discriminator="type"),
]
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
MESSAGE_TYPES: frozenset[str] = frozenset(
    {
        "agent.register",
        "hub.ack",
        "hub.reject",
        "agent.heartbeat",
        "probe.request",
        "probe.response",
        "probe.error",
        "probe.cancel",
    }
)
REPLY_TYPES: frozenset[str] = frozenset({"probe.response", "probe.error"})


def to_wire(message: Envelope) -> dict[str, Any]:
    """The message as the JSON-ready dict that goes on the wire (camelCase)."""
    return message.model_dump(mode="json", by_alias=True, exclude_none=False)

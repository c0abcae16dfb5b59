"""The enrollment exchange: `POST /api/v1/agents/enroll` body and answer.

The agent sends only its public key; the hub answers with the agent's id and
the hub's own public key, which the agent pins.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from sonde.protocol.messages import Attestation, PackDescriptor, WireModel
from sonde.protocol.names import NAME_PATTERN, refuse_secret_shape

TOKEN_PATTERN = r"^[A-Za-z0-9_-]{16,128}$"


class EnrollRequest(WireModel):
    token: Annotated[str, Field(pattern=TOKEN_PATTERN)]
    name: Annotated[str, Field(pattern=NAME_PATTERN), AfterValidator(refuse_secret_shape)]
    public_key: Annotated[str, Field(min_length=40, max_length=64)]
    hostname: Annotated[str, Field(max_length=255)]
    os: Annotated[str, Field(max_length=255)]
    os_version: Annotated[str, Field(max_length=255)] = ""
    kernel: Annotated[str, Field(max_length=255)] = ""
    arch: Annotated[str, Field(max_length=64)] = ""
    agent_version: Annotated[str, Field(max_length=64)]
    packs: tuple[PackDescriptor, ...] = ()
    attestation: Attestation


class EnrollResponse(WireModel):
    agent_id: str
    name: str
    hub_public_key: str
    heartbeat_interval_s: float


class ErrorBody(WireModel):
    code: str
    message: str


class ErrorResponse(WireModel):
    """The stable error shape of every REST answer: ``{"error": {"code", "message"}}``."""

    error: ErrorBody

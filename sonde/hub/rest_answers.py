"""The shapes of the REST answers the handlers build as dicts (`sonde.hub.rest_routes`).

The OpenAPI document (`sonde.hub.openapi`) declares them; `extra="forbid"` lets its
end-to-end test catch a handler that adds or renames a key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from sonde.hub.audit import AuditEntry
from sonde.hub.enrollment_tokens import EnrollmentTokenRecord
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.tools.views import AgentSummary
from sonde.protocol.messages import PackDescriptor


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class Health(Answer):
    status: Literal["ok", "degraded"]
    version: str
    # absent when ok, never null: the document says an optional string, with no default
    problem: str | SkipJsonSchema[None] = Field(
        default=None,
        description="Why the hub is degraded (its database or audit log cannot be written); only when degraded",
        json_schema_extra=_no_default,
    )


class AgentList(Answer):
    agents: list[AgentSummary]
    total: int = Field(description="Every agent this key may see with the tags given")
    by_status: dict[str, int] = Field(description="Those same agents ('total'), counted by status")
    matched: int = Field(
        description="Those of the status given too; 'agents' holds the first 'limit' of them"
    )
    truncated: bool = Field(description="True when 'agents' does not hold every match")


class AgentRemoved(Answer):
    removed: str = Field(description="The removed agent's id")
    name: str


class AgentTags(Answer):
    agent: str
    tags: list[str]


class AttestationAccepted(Answer):
    agent: str
    status: str
    accepted: bool = Field(description="False when no changed attestation was held")


class PackList(Answer):
    packs: list[PackDescriptor]


class ApiKeyCreated(Answer):
    key: ApiKeyRecord
    secret: str = Field(description="The key to send as a bearer token; shown this once, never stored")


class ApiKeyList(Answer):
    keys: list[ApiKeyRecord]


class EnrollmentTokenCreated(Answer):
    token: EnrollmentTokenRecord
    secret: str = Field(description="The token an agent enrolls with; shown this once, never stored")


class EnrollmentTokenList(Answer):
    tokens: list[EnrollmentTokenRecord]


class Revoked(Answer):
    revoked: str = Field(description="The id of what was revoked")


class AuditRow(AuditEntry):
    seq: int
    hash: str


class AuditEntries(Answer):
    entries: list[AuditRow] = Field(description="Newest first")
    truncated: bool = Field(description="True when older entries also matched, past the limit")


class AuditChainCheck(Answer):
    ok: bool
    rows: int
    first_bad_seq: int | None = Field(alias="firstBadSeq")
    problem: str
    starts_after: int = Field(
        alias="startsAfter",
        description="The last row pruned (`sonde hub audit prune`): the chain is checked from the row after "
        "it; 0 when none was",
    )

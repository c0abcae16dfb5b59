"""Enrollment: a single-use token plus a public key become an agent identity.

`enroll_agent` runs as one write in the store's writer, so checking the name,
spending the token and inserting the agent happen together or not at all.
A name already enrolled is never taken over silently: only a token created
for that very name (by an admin) replaces the old identity. The new identity
keeps the old one's tags (what key policies and tag filters select it by), and
its audit row names the identity replaced (`Enrollment.audit_detail`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from sonde.hub.agent_records import AgentRecord, delete_agent, find_agent_by_name, insert_agent
from sonde.hub.enrollment_tokens import EnrollmentRefused, consume_enrollment_token, peek_enrollment_token
from sonde.hub.shared_packs import described_packs
from sonde.protocol.enrollment import EnrollRequest
from sonde.protocol.signing import public_key_from_text


@dataclass(frozen=True)
class Enrollment:
    """An agent just enrolled, and the agent it replaced under that name (None for a new name)."""

    record: AgentRecord
    replaced: AgentRecord | None = None

    def audit_detail(self) -> dict[str, Any]:
        """The detail of its ``agent.enroll`` audit row: the new id; for a name enrolled again,
        the id replaced and the tags the new identity kept."""
        if self.replaced is None:
            return {"agentId": self.record.id}
        return {"agentId": self.record.id, "replaced": self.replaced.id, "tagsKept": self.record.tags}


def enroll_agent(db: sqlite_utils.Database, request: EnrollRequest, now: float | None = None) -> Enrollment:
    """Create the agent; one enrolled under its name before is replaced, and its tags kept.

    Raises `EnrollmentRefused` (token or name problems, a bad public key).
    """
    now = time.time() if now is None else now
    try:
        public_key_from_text(request.public_key)
    except ValueError as exc:
        raise EnrollmentRefused(
            "invalid_public_key", f"public key is not a valid Ed25519 key: {exc}"
        ) from None
    reserved_name = peek_enrollment_token(db, request.token)
    existing = find_agent_by_name(db, request.name)
    if existing is not None and reserved_name != request.name:
        raise EnrollmentRefused(
            "name_taken",
            f"an agent named {request.name!r} is already enrolled. An admin must remove it first "
            f"(DELETE /api/v1/agents/{existing.id}) or create a token for this name "
            f"(`sonde hub token create --name {request.name}`).",
        )
    agent_id = uuid.uuid4().hex
    consume_enrollment_token(db, request.token, request.name, agent_id, now)
    if existing is not None:
        delete_agent(db, existing.id, now)
    record = AgentRecord(
        id=agent_id,
        name=request.name,
        public_key=request.public_key,
        hostname=request.hostname,
        os=request.os,
        os_version=request.os_version,
        kernel=request.kernel,
        arch=request.arch,
        agent_version=request.agent_version,
        packs=described_packs(request.packs),
        tags=[] if existing is None else existing.tags,  # as read in this write: CLI changes too
        status="offline",
        last_seen=None,
        enrolled_at=now,
        attestation=request.attestation.model_dump(mode="json", by_alias=True),
        pending_attestation=None,
    )
    insert_agent(db, record)
    return Enrollment(record, existing)

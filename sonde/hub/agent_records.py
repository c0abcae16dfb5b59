"""Enrolled agents as stored by the hub, and the revocation list.

``AgentRecord`` mirrors a row of the ``agents`` table with the JSON columns (tags,
attestation, pending_attestation) decoded, and the set of packs the row names read from
``pack_sets`` (`sonde.hub.pack_sets`) as the copies other records share
(`sonde.hub.shared_packs`). Functions are synchronous over a
``sqlite_utils.Database``, for use through the store or directly by CLI commands.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlite_utils import Database

from sonde.hub.db import query_one, write_transaction
from sonde.hub.pack_sets import drop_unused_pack_set, pack_set_of, read_pack_set, store_pack_set
from sonde.protocol.names import NAME_PATTERN

AgentStatus = Literal["offline", "online", "degraded"]
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$"
MAX_TAGS = 64
_TAG_RE = re.compile(TAG_PATTERN)
_JSON_FIELDS = ("tags", "attestation", "pending_attestation")

Tag = Annotated[str, Field(pattern=TAG_PATTERN)]


class AgentNameTaken(ValueError):
    """Another agent is already enrolled under this name."""


class AgentRecord(BaseModel):
    """One enrolled agent. ``attestation`` is the accepted baseline; a differing report
    waits in ``pending_attestation`` for an admin."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    public_key: str
    hostname: str | None = None
    os: str | None = None
    os_version: str | None = None
    kernel: str | None = None
    arch: str | None = None
    agent_version: str | None = None
    packs: list[Any] = Field(default_factory=list)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    status: AgentStatus = "offline"
    last_seen: float | None = None
    enrolled_at: float
    attestation: dict[str, Any] | None = None
    pending_attestation: dict[str, Any] | None = None


_FIELDS = tuple(AgentRecord.model_fields)
_UPDATABLE = frozenset(_FIELDS) - {"id"}
_COLUMNS = tuple("pack_set" if name == "packs" else name for name in _FIELDS)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM agents"


def _to_row(db: Database, record: AgentRecord, names: Iterable[str] = _FIELDS) -> dict[str, Any]:
    """The fields ``names`` of ``record`` as columns: JSON encoded, the packs as the id of
    their set (stored if new)."""
    row = {name: getattr(record, name) for name in names}
    for name in _JSON_FIELDS:
        if row.get(name) is not None:
            row[name] = json.dumps(row[name], sort_keys=True)
    if "packs" in row:
        row["pack_set"] = store_pack_set(db, row.pop("packs"))
    return row


def _from_row(db: Database, row: dict[str, Any]) -> AgentRecord:
    decoded = {name: None if row[name] is None else json.loads(row[name]) for name in _JSON_FIELDS}
    packs = read_pack_set(db, row.pop("pack_set"))
    return AgentRecord.model_validate({**row, **decoded, "packs": packs})


def _ensure_name_free(db: Database, name: str, agent_id: str) -> None:
    other = find_agent_by_name(db, name)
    if other is not None and other.id != agent_id:
        raise AgentNameTaken(f"an agent named {name!r} is already enrolled (id {other.id})")


def insert_agent(db: Database, record: AgentRecord) -> None:
    """Store a newly enrolled agent. Raises AgentNameTaken if the name is in use."""
    with write_transaction(db):
        _ensure_name_free(db, record.name, record.id)
        row = _to_row(db, record)
        db.execute(
            f"INSERT INTO agents ({', '.join(_COLUMNS)}) VALUES ({', '.join(':' + c for c in _COLUMNS)})", row
        )


def get_agent(db: Database, agent_id: str) -> AgentRecord | None:
    """The agent with this id, or None."""
    row = query_one(db, f"{_SELECT} WHERE id = ?", [agent_id])
    return None if row is None else _from_row(db, row)


def find_agent_by_name(db: Database, name: str) -> AgentRecord | None:
    """The agent with this name, or None."""
    row = query_one(db, f"{_SELECT} WHERE name = ?", [name])
    return None if row is None else _from_row(db, row)


def list_agents(db: Database) -> list[AgentRecord]:
    """Every enrolled agent, by name."""
    return [_from_row(db, row) for row in db.query(f"{_SELECT} ORDER BY name")]


def mark_all_offline(db: Database) -> list[AgentRecord]:
    """Record every agent stored ``online`` as ``offline`` (a hub starting: none is connected
    yet), and one stored ``degraded`` with no claim waiting (an accept a hub missed) too;
    returns every enrolled agent, as `list_agents` lists them."""
    db.execute(
        "UPDATE agents SET status = 'offline' "
        "WHERE status = 'online' OR (status = 'degraded' AND pending_attestation IS NULL)"
    )
    return list_agents(db)


def record_departures(db: Database, last_seen: Mapping[str, float]) -> None:
    """Record each agent in ``last_seen`` (id: when it was last heard from) as gone, in one
    transaction: ``offline``, or still ``degraded`` while a claim waits for an admin (as
    `update_agent` decides for one)."""
    with write_transaction(db):
        db.conn.executemany(
            "UPDATE agents SET last_seen = ?, status = CASE "
            "WHEN status = 'degraded' AND pending_attestation IS NOT NULL THEN 'degraded' "
            "ELSE 'offline' END WHERE id = ?",
            [(seen, agent_id) for agent_id, seen in last_seen.items()],
        )


def record_last_seen(db: Database, last_seen: Mapping[str, float]) -> None:
    """Write when each agent in ``last_seen`` (id: time) was last heard from, in one transaction;
    never moves a time back, and leaves the status alone (the agents are still connected)."""
    with write_transaction(db):
        db.conn.executemany(
            "UPDATE agents SET last_seen = MAX(COALESCE(last_seen, 0), ?) WHERE id = ?",
            [(seen, agent_id) for agent_id, seen in last_seen.items()],
        )


def mend_statuses(db: Database, online: Iterable[str]) -> None:
    """Store ``online`` for exactly the agents in ``online`` (connected, not held), in one
    transaction, leaving a held agent's ``degraded`` alone.

    A status is written as an agent comes and goes; one whose write failed (a full disk, a
    database locked by another program) stayed wrong in the file, which `sonde hub agent list`
    reads, until the hub restarted. Run now and then from the writer's queue, in order after
    every connect and disconnect already queued, it mends them once writes work again.
    """
    ids = json.dumps(list(online))
    with write_transaction(db):
        db.conn.execute(
            "UPDATE agents SET status = 'offline' "
            "WHERE (status = 'online' OR (status = 'degraded' AND pending_attestation IS NULL)) "
            "AND id NOT IN (SELECT value FROM json_each(?))",
            [ids],
        )
        db.conn.execute(
            "UPDATE agents SET status = 'online' WHERE status = 'offline' AND id IN (SELECT value FROM json_each(?))",
            [ids],
        )


def update_agent(db: Database, /, agent_id: str, **fields: Any) -> AgentRecord | None:
    """Change some fields of an agent; returns the updated record, or None if the id is unknown.

    Raises ValueError for an unknown field or an invalid value (AgentNameTaken for a
    name already in use).
    """
    unknown = set(fields) - _UPDATABLE
    if unknown:
        raise ValueError(f"unknown agent field(s): {', '.join(sorted(unknown))}")
    with write_transaction(db):
        current = get_agent(db, agent_id)
        if current is None or not fields:
            return current
        updated = AgentRecord.model_validate({**dict(current), **fields})  # packs shared, not copied
        if updated.status == "degraded" and updated.pending_attestation is None:
            # held means a claim waits for an admin. A hub that did not yet see an accept made
            # from the CLI (in this file) may still write "degraded" as its agent disconnects:
            # the accept stands, and the agent is offline.
            fields = {**fields, "status": "offline"}
            updated = updated.model_copy(update={"status": "offline"})
        if "name" in fields:
            _ensure_name_free(db, updated.name, agent_id)
        old_set = pack_set_of(db, agent_id) if "packs" in fields else None
        row = _to_row(db, updated, fields)
        assignments = ", ".join(f"{name} = :{name}" for name in row)  # names checked above
        db.execute(f"UPDATE agents SET {assignments} WHERE id = :id", {**row, "id": agent_id})
        if old_set != row.get("pack_set"):
            drop_unused_pack_set(db, old_set)
    return updated


def normalize_tags(tags: Iterable[str]) -> list[str]:
    """Strip whitespace and one leading '#', drop duplicates (keeping order and case).

    Tags are matched without regard to case (`sonde.hub.policy.has_tags`, key policies), so
    'Prod' and 'prod' are one tag: the first spelling stays.
    Raises ValueError if a tag does not match TAG_PATTERN or there are more than MAX_TAGS.
    """
    normalized: list[str] = []
    seen: set[str] = set()
    for raw in tags:
        tag = raw.strip().removeprefix("#").strip()
        if not _TAG_RE.fullmatch(tag):
            raise ValueError(
                f"invalid tag {raw!r}: start with a letter or digit, then up to 63 of "
                "letters, digits, '.', '_', ':' or '-'"
            )
        if tag.lower() not in seen:
            seen.add(tag.lower())
            normalized.append(tag)
    if len(normalized) > MAX_TAGS:
        raise ValueError(f"an agent can have at most {MAX_TAGS} tags")
    return normalized


def set_tags(db: Database, agent_id: str, tags: list[str]) -> AgentRecord | None:
    """Replace an agent's tags (normalised by normalize_tags); None if the id is unknown."""
    return update_agent(db, agent_id, tags=normalize_tags(tags))


def delete_agent(db: Database, agent_id: str, now: float | None = None) -> AgentRecord | None:
    """Remove an agent and add it to the revocation list; returns what was removed, or None."""
    revoked_at = time.time() if now is None else now
    with write_transaction(db):
        record = get_agent(db, agent_id)
        if record is None:
            return None
        pack_set = pack_set_of(db, agent_id)
        db.execute("DELETE FROM agents WHERE id = ?", [agent_id])
        drop_unused_pack_set(db, pack_set)
        db.execute(
            "INSERT OR REPLACE INTO revoked_agents (id, name, revoked_at) VALUES (?, ?, ?)",
            [agent_id, record.name, revoked_at],
        )
    return record


def revocation_reason(db: Database, agent_id: str) -> str | None:
    """Why this agent id is no longer accepted, for the agent to read; None if it was never revoked.

    Its name held by another identity now means it was enrolled again (with a token for
    that name), which replaced this one; else an admin removed it.
    """
    row = query_one(db, "SELECT name FROM revoked_agents WHERE id = ?", [agent_id])
    if row is None:
        return None
    if row["name"] is not None and find_agent_by_name(db, row["name"]) is not None:
        return f"the name {row['name']} was enrolled again, by a new identity"  # as the live link is told
    return "this agent was removed by an admin"

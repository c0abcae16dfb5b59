"""Shared views of agents for tools and REST: what a caller may see, as plain data."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sonde.hub.agent_records import AgentRecord

if TYPE_CHECKING:
    from sonde.hub.core import Hub


class AgentSummary(BaseModel):
    id: str
    name: str
    status: str
    last_seen: str | None
    os: str | None
    agent_version: str | None
    packs: list[str]
    tags: list[str]


def iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def pack_descriptors(record: AgentRecord) -> list[dict[str, Any]]:
    return list(record.packs or [])


def summarize(hub: Hub, record: AgentRecord) -> AgentSummary:
    return AgentSummary(
        id=record.id,
        name=record.name,
        status=hub.fleet.status(record.id),
        last_seen=iso(hub.fleet.last_seen(record.id)),
        os=" ".join(p for p in (record.os, record.os_version) if p) or None,
        agent_version=record.agent_version,
        packs=[f"{p['name']}@{p['version']}" for p in pack_descriptors(record)],
        tags=list(record.tags or []),
    )

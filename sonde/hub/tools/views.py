"""Shared views of agents for tools and REST: what a caller may see, as plain data."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from sonde.hub.agent_records import AgentRecord
from sonde.hub.policy import has_tags
from sonde.hub.tools.base import ToolError

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
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


def visible_agents(hub: Hub, caller: Caller, tags: list[str] | None = None) -> list[AgentRecord]:
    """The agents this caller may see, filtered by tags (AND), sorted by name."""
    records = sorted(hub.fleet.records.values(), key=lambda r: r.name)
    return [
        r for r in records if caller.allows_agent(r.name, r.tags or []) and has_tags(r.tags or [], tags or [])
    ]


def resolve_agent(hub: Hub, caller: Caller, agent: str) -> AgentRecord:
    """The agent named ``agent`` if this caller may see it; otherwise a ToolError listing the choices."""
    record = hub.fleet.find(agent)
    if record is None or not caller.allows_agent(record.name, record.tags or []):
        names = [r.name for r in visible_agents(hub, caller)]
        shown = ", ".join(names[:20]) or "none"
        raise ToolError(
            f"Unknown agent {agent!r}. Agents you can reach: {shown}. Call list_agents for details."
        )
    return record


def probe_names(record: AgentRecord) -> list[str]:
    return sorted(p["name"] for pack in pack_descriptors(record) for p in pack.get("probes", []))

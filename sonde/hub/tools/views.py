"""Shared views of agents for tools and REST, as plain data (who may see which agent:
`sonde.hub.probing`; which of an agent's categories a key can run: `runnable_categories`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field

from sonde.hub.agent_records import AgentRecord
from sonde.hub.diagnostics import runbooks_for
from sonde.hub.probing import agent_probes
from sonde.hub.utc_times import iso_utc

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub


class LastRefusal(BaseModel):
    at: str = Field(description="When the hub refused it (UTC)")
    reason: str = Field(description="Why, as the hub told the agent (e.g. its clock is too far off)")
    peer: str = Field(description="The address it came from (anyone can claim an agent's id)")


LastRefusalField = Annotated[
    LastRefusal | None,
    Field(
        description="The agent's last refused connection attempt since the hub last accepted it, or null; "
        "kept in the hub's memory only (a restart forgets it)"
    ),
]


class AgentSummary(BaseModel):
    id: str
    name: str
    status: str
    last_seen: str | None
    last_refusal: LastRefusalField
    os: str | None
    agent_version: str | None
    packs: list[str]
    tags: list[str]


def iso(ts: float | None) -> str | None:
    return None if ts is None else iso_utc(ts)


def pack_labels(record: AgentRecord) -> list[str]:
    """The agent's packs as ``name@version``."""
    return [f"{p['name']}@{p['version']}" for p in record.packs]


def last_refusal(hub: Hub, agent_id: str) -> LastRefusal | None:
    refusal = hub.fleet.last_refusal(agent_id)
    if refusal is None:
        return None
    return LastRefusal(at=iso(refusal.at) or "", reason=refusal.reason, peer=refusal.peer)


def status_counts(summaries: list[AgentSummary]) -> dict[str, int]:
    """How many of ``summaries`` are in each status, by status name (list_agents', GET /agents')."""
    return dict(sorted(Counter(s.status for s in summaries).items()))


def summarize(hub: Hub, record: AgentRecord) -> AgentSummary:
    return AgentSummary(
        id=record.id,
        name=record.name,
        status=hub.fleet.status(record.id),
        last_seen=iso(hub.fleet.last_seen(record.id)),
        last_refusal=last_refusal(hub, record.id),
        os=" ".join(p for p in (record.os, record.os_version) if p) or None,
        agent_version=record.agent_version,
        packs=pack_labels(record),
        tags=list(record.tags or []),
    )


def runnable_categories(hub: Hub, caller: Caller, record: AgentRecord) -> list[str]:
    """The agent's diagnostic categories of which the caller's key may run at least one probe the
    agent offers (its pack may be older than the hub's runbook): diagnose refuses the others, so
    listing them would only send a model into that refusal."""
    offered = agent_probes(record)
    return sorted(
        category
        for category, runbook in runbooks_for(hub, record).items()
        if any(caller.allows_probe(probe) and probe in offered for probe in runbook.probes)
    )

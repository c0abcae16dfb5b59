"""Agent listing tools."""

from __future__ import annotations

import fnmatch
import time
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from sonde.hub.audit import query_audit
from sonde.hub.diagnostics import runbooks_for
from sonde.hub.policy import AGENT_NAME_GLOB
from sonde.hub.probing import current_status, resolve_agent, visible_agents_now
from sonde.hub.tools.base import AGENT_FIELD, TAGS_FIELD, TagQuery, ToolCall, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import AgentSummary, iso, pack_labels, summarize

DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000


class ListAgentsInput(ToolInput):
    tags: Annotated[list[TagQuery], TAGS_FIELD]
    status: Literal["online", "offline", "degraded"] | None = Field(
        default=None, description="Only agents in this status (e.g. offline, to see what is down)."
    )
    name: str | None = Field(
        default=None,
        pattern=f"^{AGENT_NAME_GLOB}$",
        description="Only agent names matching this glob, e.g. 'web-*'.",
    )
    limit: int = Field(
        default=DEFAULT_LIST_LIMIT,
        ge=1,
        le=MAX_LIST_LIMIT,
        description="At most this many agents in the answer (by name); the counts cover all of them.",
    )


class ListAgentsOutput(ToolOutput):
    agents: list[AgentSummary]
    online: int = Field(description="Online agents among 'total'.")
    total: int = Field(
        description="All agents you can reach with the tags given (name and status do not narrow it)."
    )
    by_status: dict[str, int] = Field(description="Those same agents ('total'), counted by status.")
    matched: int = Field(description="Agents matching the filters; 'agents' holds the first 'limit' of them.")
    truncated: bool = Field(description="True when more agents matched than 'limit': narrow the filters.")


LIST_AGENTS = f"""List the agents (machines) you can reach: id, name, status (online / offline / degraded),
last seen, OS, agent version, packs and tags, with counts by status. Use it to find agent names for
probe, diagnose and agent_overview, or to see which machines are offline (status='offline'). On a large
fleet it shows the first 'limit' (default {DEFAULT_LIST_LIMIT}) by name: narrow with name (a glob), status or tags."""


async def list_agents(call: ToolCall, args: ListAgentsInput) -> ListAgentsOutput:
    summaries = [summarize(call.hub, r) for r in await visible_agents_now(call.hub, call.caller, args.tags)]
    by_status = Counter(s.status for s in summaries)
    matched = [
        s
        for s in summaries
        if (args.status is None or s.status == args.status)
        and (args.name is None or fnmatch.fnmatchcase(s.name, args.name))
    ]
    return ListAgentsOutput(
        agents=matched[: args.limit],
        online=by_status["online"],
        total=len(summaries),
        by_status=dict(sorted(by_status.items())),
        matched=len(matched),
        truncated=len(matched) > args.limit,
    )


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("list_agents", LIST_AGENTS, ListAgentsInput, ListAgentsOutput, list_agents)
]


# --- agent_overview ----------------------------------------------------------


class AttestationSummary(BaseModel):
    agent_version: str | None
    code_hash: str | None
    packs: dict[str, str]
    os: str | None
    kernel: str | None
    pending_change: bool


class RecentProbe(BaseModel):
    ts: str | None
    action: str
    probe: str | None
    outcome: str
    duration_ms: float | None
    by_you: bool


class AgentOverviewInput(ToolInput):
    agent: Annotated[str, AGENT_FIELD]
    recent: int = Field(default=10, ge=0, le=50, description="How many recent probes to show.")


class AgentOverviewOutput(ToolOutput):
    id: str
    name: str
    status: str
    hostname: str | None
    os: str | None
    kernel: str | None
    arch: str | None
    agent_version: str | None
    enrolled_at: str | None
    last_seen: str | None
    connected_since: str | None
    uptime_s: float | None
    packs: list[str]
    categories: list[str]
    tags: list[str]
    attestation: AttestationSummary
    recent_probes: list[RecentProbe]


AGENT_OVERVIEW = """Everything about ONE agent: identity (hostname, OS, kernel, arch), status and
last seen, machine uptime, agent version and attestation (code hash, packs; pending_change=true means
it is held until an admin accepts it), packs, tags, categories, and its most recent probes from the
audit log. Use it when the user asks about a specific machine."""


async def agent_overview(call: ToolCall, args: AgentOverviewInput) -> AgentOverviewOutput:
    hub, caller = call.hub, call.caller
    record, _ = await current_status(hub, resolve_agent(hub, caller, args.agent))
    session = hub.fleet.sessions.get(record.id)
    boot = session.register.boot_time if session else None
    entries = await hub.read_audit(query_audit, agent=record.name, limit=200) if args.recent else []
    recent = [
        RecentProbe(
            ts=iso(e["ts"]),
            action=e["action"],
            probe=(e["detail"] or {}).get("probe"),
            outcome=e["outcome"],
            duration_ms=e["duration_ms"],
            by_you=e["actor"] == caller.key_id,
        )
        for e in entries
        if (e["detail"] or {}).get("probe") and caller.allows_probe((e["detail"] or {})["probe"])
    ][: args.recent]
    baseline = record.attestation or {}
    return AgentOverviewOutput(
        id=record.id,
        name=record.name,
        status=hub.fleet.status(record.id),
        hostname=record.hostname,
        os=" ".join(p for p in (record.os, record.os_version) if p) or None,
        kernel=record.kernel,
        arch=record.arch,
        agent_version=record.agent_version,
        enrolled_at=iso(record.enrolled_at),
        last_seen=iso(hub.fleet.last_seen(record.id)),
        connected_since=iso(session.connected_at) if session else None,
        uptime_s=round(time.time() - boot, 1) if boot else None,
        packs=pack_labels(record),
        categories=sorted(runbooks_for(hub, record)),
        tags=list(record.tags),
        attestation=AttestationSummary(
            agent_version=baseline.get("agentVersion"),
            code_hash=baseline.get("codeHash"),
            packs=baseline.get("packs", {}),
            os=baseline.get("os"),
            kernel=baseline.get("kernel"),
            pending_change=record.pending_attestation is not None,
        ),
        recent_probes=recent,
    )


TOOLS.append(
    ToolSpec("agent_overview", AGENT_OVERVIEW, AgentOverviewInput, AgentOverviewOutput, agent_overview)
)

"""Agent listing tools."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from sqlite_utils import Database

from sonde.hub.agent_records import AgentRecord
from sonde.hub.attestation import BACK_WHILE_HELD, compare
from sonde.hub.policy import AGENT_NAME_GLOB
from sonde.hub.probing import current_status, resolve_agent, visible_agents_now
from sonde.hub.tools.base import (
    AGENT_FIELD,
    TAGS_FIELD,
    DurationMs,
    TagQuery,
    ToolCall,
    ToolInput,
    ToolOutput,
    ToolSpec,
    within_budget,
)
from sonde.hub.tools.views import (
    AgentSummary,
    LastRefusalField,
    iso,
    last_refusal,
    pack_labels,
    runnable_categories,
    status_counts,
    summarize,
)

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
    matched: int = Field(
        description="Agents matching the filters; 'agents' holds the first 'limit' of them, or fewer "
        "when more would not fit in about 96 KiB."
    )
    truncated: bool = Field(description="True when 'agents' does not hold every match: narrow the filters.")


LIST_AGENTS = f"""List the agents (machines) you can reach: id, name, status (online / offline / degraded),
last seen, last refused connection attempt (why the hub turned it away, e.g. its clock is off), OS,
agent version, packs and tags, with counts by status. Use it to find agent names for probe, diagnose
and agent_overview, or to see which machines are offline (status='offline') and why. On a large
fleet it shows the first 'limit' (default {DEFAULT_LIST_LIMIT}) by name, fewer when more would not fit in
about 96 KiB: narrow with name (a glob), status or tags."""


async def list_agents(call: ToolCall, args: ListAgentsInput) -> ListAgentsOutput:
    summaries = [summarize(call.hub, r) for r in await visible_agents_now(call.hub, call.caller, args.tags)]
    by_status = status_counts(summaries)
    matched = [
        s
        for s in summaries
        if (args.status is None or s.status == args.status)
        and (args.name is None or fnmatch.fnmatchcase(s.name, args.name))
    ]
    listed = within_budget(matched[: args.limit])
    return ListAgentsOutput(
        agents=listed,
        online=by_status.get("online", 0),
        total=len(summaries),
        by_status=by_status,
        matched=len(matched),
        truncated=len(matched) > len(listed),
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
    pending_changes: list[str] = Field(
        default_factory=list,
        description="What the held claim changes from this accepted baseline, one item per field "
        "('codeHash: old -> new'); empty when nothing is held",
    )


class RecentProbe(BaseModel):
    ts: str | None
    action: str
    probe: str | None
    outcome: str
    duration_ms: DurationMs | None
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
    last_refusal: LastRefusalField
    connected_since: str | None
    uptime_s: float | None
    packs: list[str]
    categories: list[str] = Field(
        description="Its diagnostic categories your key can run (some probe of each)."
    )
    tags: list[str]
    attestation: AttestationSummary
    recent_probes: list[RecentProbe] = Field(
        description="Its newest probes (at most 'recent') from the audit log, newest first: every key's "
        "for an admin key, only its own for a member key."
    )


def held_changes(record: AgentRecord) -> list[str]:
    """What a held claim changes from the accepted baseline; [] when none is held."""
    if record.pending_attestation is None:
        return []
    return compare(record.attestation, record.pending_attestation, first_connect=False).changes or [
        BACK_WHILE_HELD
    ]


AGENT_OVERVIEW = """Everything about ONE agent: identity (hostname, OS, kernel, arch), status and
last seen, machine uptime, agent version and attestation (code hash, packs; pending_change=true means
it is held until an admin accepts it, pending_changes says what changed), packs, tags, the categories your key can run, and its most
recent probes from the audit log (as query_logs' audit source: an admin key sees every key's, a member
key only its own). Use it when the user asks about a specific machine."""

# A cheap first cut in SQL at the rows that name a probe (a probe's own row, a refusal of one):
# their detail, stored as canonical JSON, holds this key. Each is then checked on its decoded detail.
_NAMES_A_PROBE = """instr(coalesce(detail, ''), '"probe":') > 0"""
_PROBE_COLUMNS = ("seq", "ts", "actor", "action", "outcome", "duration_ms")


def recent_probe_rows(
    db: Database, agent: str, actor: str | None, visible: Callable[[str], bool], count: int
) -> list[dict[str, Any]]:
    """The newest ``count`` audit rows of probes on ``agent`` whose probe ``visible`` accepts,
    newest first (only ``actor``'s, unless None), with ``probe`` read from their detail.

    Reads back as far as it takes: the agent's other rows (every tool call naming it) and the
    probes the caller may not see take no place among the ``count``.
    """
    where = ["target = ?", _NAMES_A_PROBE] + (["actor = ?"] if actor is not None else [])
    query = (
        f"SELECT {', '.join(_PROBE_COLUMNS)}, detail FROM audit WHERE {' AND '.join(where)} ORDER BY seq DESC"
    )
    found: list[dict[str, Any]] = []
    cursor = db.conn.execute(query, [agent] if actor is None else [agent, actor])
    try:  # row by row, newest first, so no more is read than the answer needs
        for *values, detail in cursor:
            probe = _probe_named(detail)
            if probe is not None and visible(probe):
                found.append({**dict(zip(_PROBE_COLUMNS, values, strict=True)), "probe": probe})
                if len(found) == count:
                    break
    finally:
        cursor.close()
    return found


def _probe_named(detail: str) -> str | None:
    try:
        probe = json.loads(detail).get("probe")
    except (ValueError, AttributeError):  # a row edited into something else: `audit verify` names it
        return None
    return probe if isinstance(probe, str) else None


async def agent_overview(call: ToolCall, args: AgentOverviewInput) -> AgentOverviewOutput:
    hub, caller = call.hub, call.caller
    # status and pending_change of one moment: the fleet may change during the reads below
    record, status = await current_status(hub, resolve_agent(hub, caller, args.agent))
    session = hub.fleet.sessions.get(record.id)
    uptime = session.uptime_s() if session else None
    own_only = None if caller.is_admin else caller.key_id  # as query_logs' audit source shows a member
    rows = (
        await hub.read_audit(recent_probe_rows, record.name, own_only, caller.allows_probe, args.recent)
        if args.recent
        else []
    )
    recent = [
        RecentProbe(
            ts=iso(row["ts"]),
            action=row["action"],
            probe=row["probe"],
            outcome=row["outcome"],
            duration_ms=row["duration_ms"],
            by_you=row["actor"] == caller.key_id,
        )
        for row in rows
    ]
    baseline = record.attestation or {}
    return AgentOverviewOutput(
        id=record.id,
        name=record.name,
        status=status,
        hostname=record.hostname,
        os=" ".join(p for p in (record.os, record.os_version) if p) or None,
        kernel=record.kernel,
        arch=record.arch,
        agent_version=record.agent_version,
        enrolled_at=iso(record.enrolled_at),
        last_seen=iso(hub.fleet.last_seen(record.id)),
        last_refusal=last_refusal(hub, record.id),
        connected_since=iso(session.connected_at) if session else None,
        uptime_s=round(uptime, 1) if uptime is not None else None,
        packs=pack_labels(record),
        categories=runnable_categories(hub, caller, record),
        tags=list(record.tags),
        attestation=AttestationSummary(
            agent_version=baseline.get("agentVersion"),
            code_hash=baseline.get("codeHash"),
            packs=baseline.get("packs", {}),
            os=baseline.get("os"),
            kernel=baseline.get("kernel"),
            pending_change=record.pending_attestation is not None,
            pending_changes=held_changes(record),
        ),
        recent_probes=recent,
    )


TOOLS.append(
    ToolSpec("agent_overview", AGENT_OVERVIEW, AgentOverviewInput, AgentOverviewOutput, agent_overview)
)

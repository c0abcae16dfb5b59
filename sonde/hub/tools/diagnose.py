"""`diagnose`: one category's runbook on one agent, its findings and the raw readings."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import trio
from pydantic import BaseModel, Field, JsonValue

from sonde.hub.diagnostics import RunbookOutcome, run_runbooks, runbooks_for
from sonde.hub.errors import Denial, forbidden, not_found, unavailable
from sonde.hub.probing import agent_probes, capitalized, current_status, held, older_pack, resolve_agent
from sonde.hub.tools.base import (
    AGENT_FIELD,
    AgentWait,
    DurationMs,
    ToolCall,
    ToolInput,
    ToolOutput,
    ToolSpec,
)
from sonde.hub.tools.health import CATEGORY, READING_CAP_BYTES, FindingOut, finding_outs
from sonde.packs.executor import cap_result

if TYPE_CHECKING:
    from sonde.hub.core import Hub

RUNBOOK_GRACE_S = 2  # a runbook's probes may run their full timeout; its answer comes within this after


class DiagnoseInput(ToolInput):
    agent: Annotated[str, AGENT_FIELD]
    category: CATEGORY = Field(description="A runbook category from list_capabilities, e.g. 'system'.")
    description: str | None = Field(
        default=None, max_length=500, description="What the user reported, for the audit trail."
    )


class ReadingOut(BaseModel):
    probe: str
    status: str
    result: dict[str, JsonValue] | None
    error: str | None
    duration_ms: DurationMs | None
    truncated: bool


class DiagnoseOutput(ToolOutput):
    agent: str
    category: str
    findings: list[FindingOut]
    readings: list[ReadingOut]
    complete: bool


DIAGNOSE = """Deep look at ONE category on ONE agent (e.g. "check postgres on db-1"): runs that
category's runbook and returns its findings plus the raw reading of each probe (large readings are
truncated, marked truncated=true). A probe the agent's older pack lacks (mid-upgrade) is not run: its
reading has status not_offered and says why, and the answer is not complete, as when a probe fails.
Categories per agent come from list_capabilities.
Use it after health_check points at an area, or when the user names one."""


async def diagnose(call: ToolCall, args: DiagnoseInput, *, via: str = "mcp.diagnose") -> DiagnoseOutput:
    outcome = await diagnose_agent(call, args.agent, args.category, args.description, via=via)
    readings = []
    for step in outcome.steps:
        result, truncated = step.result, False
        if result is not None:
            result, truncated, _ = cap_result(result, READING_CAP_BYTES)
        readings.append(
            ReadingOut(
                probe=step.probe,
                status=step.status,
                result=result,
                error=step.error,
                duration_ms=step.duration_ms,
                truncated=truncated,
            )
        )
    return DiagnoseOutput(
        agent=outcome.agent.name,
        category=args.category,
        findings=finding_outs(outcome),
        readings=readings,
        complete=all(s.status == "ok" for s in outcome.steps),
    )


async def diagnose_agent(
    call: ToolCall, agent: str, category: str, description: str | None, *, via: str = "mcp.diagnose"
) -> RunbookOutcome:
    """Run one category on one agent for this caller (shared with the REST route)."""
    hub, caller = call.hub, call.caller
    record = resolve_agent(hub, caller, agent)
    runbooks = runbooks_for(hub, record)
    runbook = runbooks.get(category)
    if runbook is None:
        raise not_found(
            f"Agent {record.name} has no {category!r} category. Its categories: {', '.join(runbooks) or 'none'}."
        )
    record, status = await current_status(hub, record)
    if status == "degraded":
        raise held(record)
    if status != "online":
        raise unavailable(f"{capitalized(hub.fleet.unavailable_reason(record.id))}. Check list_agents.")
    allowed = [probe for probe in runbook.probes if caller.allows_probe(probe)]
    if not allowed:
        raise forbidden(
            f"Your API key's policy allows none of the {category!r} category's probes "
            f"({', '.join(runbook.probes)}): {caller.policy.describe()}.",
            Denial("probe_not_allowed", record.name, {"agentId": record.id, "category": category}),
        )
    offered = agent_probes(record)
    if not any(probe in offered for probe in allowed):  # nothing of the category to run there
        why = older_pack(hub, record, allowed[0]) or "its packs do not have them"
        raise not_found(f"Agent {record.name} offers none of the {category!r} category's probes: {why}.")
    outcome = RunbookOutcome(record, runbook)
    started = time.perf_counter()
    with trio.move_on_after(hub.config.probe_timeout_s + RUNBOOK_GRACE_S):
        await run_runbooks(hub, caller, [[outcome]], via=via)
    await hub.audit(
        caller.key_id,
        via,
        record.name,
        "ok" if outcome.complete else "partial",
        duration_ms=(time.perf_counter() - started) * 1000,
        detail={"category": category, "description": description or ""},
    )
    return outcome


def diagnose_wait(hub: Hub, args: DiagnoseInput) -> AgentWait:
    return AgentWait(
        f"{args.agent}: the {args.category} runbook", hub.config.probe_timeout_s + RUNBOOK_GRACE_S
    )


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("diagnose", DIAGNOSE, DiagnoseInput, DiagnoseOutput, diagnose, waits_on_agents=diagnose_wait)
]

"""`health_check`: every category on many agents, findings first (`diagnose` looks at one)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

import trio
from pydantic import BaseModel, Field

from sonde.hub.agent_records import AgentRecord
from sonde.hub.diagnostics import RunbookOutcome, run_runbooks, runbooks_for
from sonde.hub.errors import HubError, not_found
from sonde.hub.policy import has_tags, normalize_tags
from sonde.hub.probing import current_status, resolve_agent, visible_agents
from sonde.hub.tools.base import (
    AGENT_FIELD,
    TAGS_FIELD,
    AgentWait,
    TagQuery,
    ThrottledProgress,
    ToolCall,
    ToolInput,
    ToolOutput,
    ToolSpec,
)
from sonde.protocol.names import LOWER_WORD

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub

CATEGORY = Annotated[str, Field(pattern=LOWER_WORD)]
READING_CAP_BYTES = 16 * 1024


class FindingOut(BaseModel):
    severity: Literal["critical", "warning", "info"]
    agent: str
    category: str
    title: str
    detail: str
    probe: str


class Summary(BaseModel):
    critical: int
    warning: int
    info: int
    agents_checked: int
    agents_unreachable: int
    probes_run: int
    probes_succeeded: int
    probes_failed: int
    probes_not_started: int = Field(
        default=0, description="Steps never asked before the deadline (their turn had not come): not failed."
    )
    duration_ms: float


class Unreachable(BaseModel):
    agent: str
    reason: str


CategoryState = Literal["ok", "warning", "critical", "incomplete", "not_checked"]


class CategoryStatus(BaseModel):
    category: str
    status: CategoryState
    agents: int


class Skipped(BaseModel):
    agent: str
    probe: str
    reason: str


class NotOffered(Skipped):
    """A step not run because the agent's pack lacks the probe: a skipped one's fields."""


class Failed(BaseModel):
    agent: str
    probe: str
    status: Literal["error", "timeout"]
    reason: str


class HealthCheckInput(ToolInput):
    agent: Annotated[str, AGENT_FIELD] | None = Field(
        default=None, description="Only this agent (name or id); it must carry any tags given too."
    )
    tags: Annotated[list[TagQuery], TAGS_FIELD]
    categories: list[CATEGORY] = Field(
        default_factory=list, max_length=32, description="Only these categories (default: all that apply)."
    )
    deadline_s: float = Field(
        default=10.0, ge=1, le=120, description="Return what has come back after this many seconds (partial)."
    )


# a step's statuses when it was not run: policy forbids it, the pack lacks it, its turn had not come
NOT_RUN = ("skipped", "not_offered", "not_started")
MAX_LISTED = 50  # per list of a health_check answer: a fleet's worth would swamp the model


class HealthCheckOutput(ToolOutput):
    summary: Summary
    findings: list[FindingOut]
    unreachable: list[Unreachable]
    categories: list[CategoryStatus]
    skipped: list[Skipped]
    failed: list[Failed] = Field(
        default_factory=list,
        description="The probes that ran and did not answer: an error (with the agent's or hub's reason) "
        "or no answer before the deadline.",
    )
    not_offered: list[NotOffered] = Field(
        default_factory=list,
        description="Runbook steps not run on an agent because its pack there does not have the probe (an "
        "older Sonde or pack, mid-upgrade): not checked on that agent, not a failure; upgrade it there.",
    )
    partial: bool
    categories_not_found: list[str] = Field(
        default_factory=list,
        description="Requested categories that none of the matching agents has (the others were run).",
    )
    omitted: dict[str, int] = Field(
        default_factory=dict,
        description=f"How many findings / unreachable / skipped / failed / not_offered entries were left out "
        f"(each list shows at most {MAX_LISTED}, the most severe first); narrow with agent, tags or categories "
        "to see them.",
    )


HEALTH_CHECK = f"""Start here for broad questions ("is something wrong?", "how is #prod?").
Runs every applicable diagnostic category (system, and each pack's: postgres, nginx, ...) on the
matching online agents in parallel and returns a short ranked answer: findings sorted
critical > warning > info, each naming agent, category and the probe it came from; the agents it
could not reach and the probes that failed or timed out, each with its reason (at most {MAX_LISTED} of each list; 'omitted' counts the rest, 'summary' counts all); and
per-category status, the first that applies of critical > warning > incomplete > ok: a critical or
warning finding decides it even when some of the category's probes did not answer; incomplete when a
probe was skipped by your key's policy, failed or timed out; not_checked when none ran. A probe an
agent's older pack lacks (mid-upgrade) is not run there and listed in not_offered, with why: not a
failure, but its category is incomplete, as for a skipped one. Probes whose turn had not come by the
deadline (a large fleet) are not run and only counted, in summary.probes_not_started. A requested
category no matching agent has is refused, or, when others were run, listed in categories_not_found;
tags no agent carries are refused, and so is a check when your key reaches no agent at all.
Follow up with diagnose (one category on one agent), probe (one reading) or query_logs (root cause).
Pass tags only when the user names them with '#'."""


def finding_outs(outcome: RunbookOutcome) -> list[FindingOut]:
    return [
        FindingOut(
            severity=f.severity,
            agent=outcome.agent.name,
            category=outcome.runbook.category,
            title=f.title,
            detail=f.detail,
            probe=f.probe,
        )
        for f in outcome.findings
    ]


def summarize_outcomes(
    outcomes: list[RunbookOutcome],
    unreachable: list[Unreachable],
    started: float,
    *,
    categories_not_found: list[str] | None = None,
) -> HealthCheckOutput:
    findings = sorted(
        (f for o in outcomes for f in finding_outs(o)),
        key=lambda f: (("critical", "warning", "info").index(f.severity), f.agent, f.title),
    )
    steps = [s for o in outcomes for s in o.steps if s.status not in NOT_RUN]
    by_category: dict[str, list[RunbookOutcome]] = {}
    for outcome in outcomes:
        by_category.setdefault(outcome.runbook.category, []).append(outcome)
    categories = [category_status(cat, group) for cat, group in sorted(by_category.items())]
    skipped = [
        Skipped(agent=o.agent.name, probe=s.probe, reason=s.error or "")
        for o in outcomes
        for s in o.steps
        if s.status == "skipped"
    ]
    not_offered = [
        NotOffered(agent=o.agent.name, probe=s.probe, reason=s.error or "")
        for o in outcomes
        for s in o.steps
        if s.status == "not_offered"
    ]
    summary = Summary(
        critical=sum(f.severity == "critical" for f in findings),
        warning=sum(f.severity == "warning" for f in findings),
        info=sum(f.severity == "info" for f in findings),
        agents_checked=len({o.agent.id for o in outcomes}),
        agents_unreachable=len(unreachable),
        probes_run=len(steps),
        probes_succeeded=sum(s.status == "ok" for s in steps),
        probes_failed=sum(s.status != "ok" for s in steps),
        probes_not_started=sum(s.status == "not_started" for o in outcomes for s in o.steps),
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
    failed = [
        Failed(
            agent=o.agent.name,
            probe=s.probe,
            status="timeout" if s.status == "timeout" else "error",
            reason=s.error or "",
        )
        for o in outcomes
        for s in o.steps
        if s.status != "ok" and s.status not in NOT_RUN
    ]
    partial = any(s.status in ("timeout", "not_started") for o in outcomes for s in o.steps)
    lists = {
        "findings": len(findings),
        "unreachable": len(unreachable),
        "skipped": len(skipped),
        "failed": len(failed),
        "not_offered": len(not_offered),
    }
    return HealthCheckOutput(
        summary=summary,
        findings=findings[:MAX_LISTED],
        unreachable=unreachable[:MAX_LISTED],
        categories=categories,
        skipped=skipped[:MAX_LISTED],
        failed=failed[:MAX_LISTED],
        not_offered=not_offered[:MAX_LISTED],
        partial=partial,
        categories_not_found=categories_not_found or [],
        omitted={name: count - MAX_LISTED for name, count in lists.items() if count > MAX_LISTED},
    )


def category_status(category: str, outcomes: list[RunbookOutcome]) -> CategoryStatus:
    """critical > warning > incomplete > ok, the first that applies: the worst finding decides, even
    when other probes were skipped (the key's policy), failed or timed out; without a critical or
    warning finding such a probe makes it incomplete. One where no probe ran is not_checked, never ok.
    A step an agent does not offer (its older pack) is not run, as a skipped one: it makes the category
    incomplete, never ok.
    HEALTH_CHECK tells the model exactly this; keep the two in step."""
    steps = [s for o in outcomes for s in o.steps]
    severities = {f.severity for o in outcomes for f in o.findings}
    status: CategoryState
    if all(s.status in NOT_RUN for s in steps):
        status = "not_checked"
    elif "critical" in severities:
        status = "critical"
    elif "warning" in severities:
        status = "warning"
    elif any(s.status != "ok" for s in steps):
        status = "incomplete"
    else:
        status = "ok"
    return CategoryStatus(category=category, status=status, agents=len(outcomes))


def hashtags(tags: list[str]) -> str:
    """``#prod #web``: tags as a person names them."""
    return " ".join(f"#{t}" for t in tags)


def check_agent_tags(record: AgentRecord, tags: list[str]) -> None:
    """Refuse a named agent that does not carry all of ``tags``: agent and tags both apply."""
    if has_tags(record.tags, tags):
        return
    wanted, its = hashtags(normalize_tags(tags)), hashtags(record.tags) or "none"
    raise not_found(
        f"Agent {record.name} does not carry the tags {wanted}; its tags: {its}. Drop tags to check "
        f"{record.name}, or pick an agent that has them (list_agents with these tags)."
    )


def nothing_to_check(caller: Caller) -> HubError:
    """The refusal of a health_check with no agent at all to check (the tags refusal's sibling)."""
    why = "none is enrolled"
    if not caller.is_admin:  # whether any is enrolled is not this key's to know
        why = f"your API key's policy ({caller.policy.describe()}) reaches no enrolled agent, or {why}"
    return not_found(
        f"No agent you can reach to check: {why}. Call list_agents to see the agents you can reach."
    )


def matching_agents(call: ToolCall, args: HealthCheckInput) -> list[AgentRecord]:
    """The agent named (if it carries the tags), else every visible agent with the tags."""
    if args.agent is None:
        records = visible_agents(call.hub, call.caller, args.tags)
        if not records and not args.tags:  # checking nothing would read as an all-clear
            raise nothing_to_check(call.caller)
        if not records:  # the same, for tags no agent carries
            in_use = sorted({tag for r in visible_agents(call.hub, call.caller) for tag in r.tags})
            wanted, shown = hashtags(normalize_tags(args.tags)), hashtags(in_use[:30]) or "none"
            raise not_found(
                f"No agent you can reach carries the tags {wanted}. Tags in use: {shown}. "
                "Check the tags with list_agents, or drop them."
            )
        return records
    record = resolve_agent(call.hub, call.caller, args.agent)
    check_agent_tags(record, args.tags)
    return [record]


def missing_categories(requested: list[str], records: list[AgentRecord], offered: set[str]) -> list[str]:
    """The requested categories that none of ``records`` (offering ``offered``) has.

    Refuses when that is every requested category: running nothing would read as an all-clear.
    With no matching agent at all there is nothing to say (`matching_agents` refused that already).
    """
    if not records:
        return []
    missing = [c for c in dict.fromkeys(requested) if c not in offered]
    if not missing or len(missing) < len(set(requested)):
        return missing
    names = " or ".join(repr(c) for c in missing)
    listed = ", ".join(sorted(offered)) or "none"
    if len(records) == 1:
        message = f"Agent {records[0].name} has no {names} category. Its categories: {listed}."
    else:
        message = (
            f"None of the {len(records)} matching agents has a {names} category. Their categories: {listed}."
        )
    raise not_found(f"{message} Call list_capabilities to see which agent has which.")


async def health_check(
    call: ToolCall, args: HealthCheckInput, *, via: str = "mcp.health_check"
) -> HealthCheckOutput:
    """The tool; ``via`` names the surface on the audit log (``rest.health_check`` for REST)."""
    hub, caller = call.hub, call.caller
    started = time.perf_counter()
    records = matching_agents(call, args)
    runbooks_of = {record.id: runbooks_for(hub, record) for record in records}
    not_found_categories: list[str] = []
    if args.categories:
        offered = {category for runbooks in runbooks_of.values() for category in runbooks}
        not_found_categories = missing_categories(args.categories, records, offered)
    unreachable: list[Unreachable] = []
    plans: list[list[RunbookOutcome]] = []
    for listed in records:
        record, status = await current_status(hub, listed)
        if status != "online":
            unreachable.append(Unreachable(agent=record.name, reason=hub.fleet.unavailable_reason(record.id)))
            continue
        runbooks = runbooks_of[record.id]
        wanted = [rb for cat, rb in runbooks.items() if not args.categories or cat in args.categories]
        plans.append([RunbookOutcome(record, rb) for rb in wanted])
    done = 0
    progress = ThrottledProgress(call.progress)

    async def agent_done(outcomes: list[RunbookOutcome]) -> None:
        nonlocal done
        done += 1
        if outcomes:
            await progress(done, len(plans), f"{outcomes[0].agent.name} checked")

    with trio.move_on_after(args.deadline_s):
        await run_runbooks(hub, caller, plans, via=via, on_agent_done=agent_done)
    await hub.audit(
        caller.key_id,
        via,
        args.agent,
        "ok",
        duration_ms=(time.perf_counter() - started) * 1000,
        detail={
            "agents": len(records),
            "tags": args.tags,
            "categories": args.categories,
            "categories_not_found": not_found_categories,
        },
    )
    outcomes = [o for plan in plans for o in plan]
    return summarize_outcomes(outcomes, unreachable, started, categories_not_found=not_found_categories)


def health_wait(hub: Hub, args: HealthCheckInput) -> AgentWait:
    tags = " ".join(f"#{tag}" for tag in normalize_tags(args.tags))
    awaited = args.agent or (f"the agents tagged {tags}" if tags else "the fleet")
    return AgentWait(f"{awaited}: health_check", args.deadline_s)


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec(
        "health_check",
        HEALTH_CHECK,
        HealthCheckInput,
        HealthCheckOutput,
        health_check,
        reports_progress=True,
        waits_on_agents=health_wait,
    ),
]

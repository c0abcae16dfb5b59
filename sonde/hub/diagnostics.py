"""Runbooks on agents: run a category's probes, turn readings into findings.

`run_runbooks` runs runbooks on agents (one for `diagnose`, a fleet's for
`health_check`) through a pool of workers (`step_pool`). It records each step as it
finishes, so when a caller's deadline cancels it the outcomes still hold
everything that came back (the `health_check` partial answer).

A runbook is the hub's; an agent's packs may be older (a rolling upgrade) and
lack a probe it names. Such a step is not run (`check_probe` would refuse it as
an unknown probe there): it is marked ``not_offered``, with why, and counts as
neither run nor failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sonde.hub.agent_records import AgentRecord
from sonde.hub.errors import HubError
from sonde.hub.executor_limits import FANOUT_LIMIT, MAX_SET_ASIDE
from sonde.hub.probing import agent_probes, older_pack, run_probe_for
from sonde.hub.step_pool import run_pool
from sonde.packs.runbook import Failure, Finding, Runbook

log = logging.getLogger(__name__)
MALFORMED_READING = "malformed_reading"  # a step's code: its reading could not be read
NOT_STARTED = (
    "not asked: the deadline came before its turn (a call's probes run a few hundred at once, "
    "agent by agent); give a longer deadline_s, or fewer agents or categories"
)

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub


@dataclass
class StepOutcome:
    probe: str
    status: str = "pending"  # ok | error | skipped | not_offered | timeout | not_started | pending
    asked: bool = False  # taken up to be run (`run_step`): past the deadline, a timeout, else not_started
    result: dict[str, Any] | None = None
    error: str | None = None
    code: str | None = None  # an error's code (the agent's, or the hub's)
    duration_ms: float | None = None


@dataclass
class RunbookOutcome:
    agent: AgentRecord
    runbook: Runbook
    steps: list[StepOutcome] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(step.status != "pending" for step in self.steps)

    def finish(self) -> None:
        """Evaluate what came back; mark what did not as timed out, or, never asked before the
        deadline (its turn among the call's steps had not come), as not started."""
        readings = {s.probe: s.result for s in self.steps if s.status == "ok" and s.result is not None}
        failures = {
            s.probe: Failure(s.code, s.error or "")
            for s in self.steps
            if s.status == "error" and s.code is not None
        }
        malformed: dict[str, str] = {}
        self.findings = self.runbook.evaluate(readings, failures, malformed)
        for step in self.steps:
            if step.status == "pending" and step.asked:
                step.status, step.error = "timeout", "no answer before the deadline"
            elif step.status == "pending":
                step.status, step.error = "not_started", NOT_STARTED
            elif step.probe in malformed:  # one agent's odd answer spoils its own step, no one else's
                step.status, step.code = "error", MALFORMED_READING
                step.error = (
                    f"the agent's answer does not have {step.probe}'s shape ({malformed[step.probe]})"
                )
                log.warning(
                    "agent %s: its answer to %s does not have that probe's shape: %r",
                    self.agent.name,
                    step.probe,
                    malformed[step.probe],
                )


def runbooks_for(hub: Hub, record: AgentRecord) -> dict[str, Runbook]:
    """The categories this agent can answer: runbooks of packs it runs that the hub knows."""
    agent_packs = {p["name"] for p in record.packs}
    found: dict[str, Runbook] = {}
    for pack in hub.packs.packs.values():
        if pack.name in agent_packs:
            found.update(pack.runbooks)
    return dict(sorted(found.items()))


def describe_categories(hub: Hub) -> dict[str, str]:
    return {cat: rb.description for p in hub.packs.packs.values() for cat, rb in p.runbooks.items()}


AgentDone = Callable[[list[RunbookOutcome]], Awaitable[None]]


@dataclass(eq=False)
class _Job:
    plan: int
    outcome: RunbookOutcome
    step: StepOutcome
    params: dict[str, Any]


async def run_runbooks(
    hub: Hub,
    caller: Caller,
    plans: list[list[RunbookOutcome]],
    *,
    via: str,
    on_agent_done: AgentDone | None = None,
    workers: int = FANOUT_LIMIT,
) -> None:
    """Run every step of every plan (one plan: one agent's runbooks), at most ``workers`` at once
    but for slow ones (`run_pool`), but those the key's policy forbids or the agent does not
    offer (`plan_jobs`).

    The pool takes the steps agent by agent, so the first agents finish (and ``on_agent_done``
    reports them) early; a thousand agents do not mean thousands of tasks parked on a limiter,
    and agents that hang do not keep the others from being asked. Each outcome gets
    its findings when its last step ends; when this is cancelled (the caller's
    deadline), everything still pending is marked timed out and evaluated, so
    the outcomes hold all that came back (the partial answer).
    """
    jobs = plan_jobs(hub, caller, plans)

    async def run(job: _Job) -> None:
        await run_step(hub, caller, job.outcome.agent, job.step, job.params, via)
        # run_step sets the step's status with no checkpoint before this check, so exactly one
        # worker (the one that ended an outcome's last step) sees the outcome complete here
        if job.outcome.complete:
            job.outcome.finish()
            if on_agent_done is not None and all(o.complete for o in plans[job.plan]):
                await on_agent_done(plans[job.plan])

    try:
        for outcomes in plans:
            for outcome in outcomes:
                if outcome.complete:  # every step skipped: nothing to wait for
                    outcome.finish()
            if on_agent_done is not None and all(o.complete for o in outcomes):
                await on_agent_done(outcomes)
        await run_pool(
            jobs,
            run,
            workers=workers,
            max_set_aside=MAX_SET_ASIDE,
            on_watch=hub.fleet.fan_out_places.give_back_slow,
        )
    finally:
        for outcomes in plans:
            for outcome in outcomes:
                if not outcome.complete:
                    outcome.finish()


def plan_jobs(hub: Hub, caller: Caller, plans: list[list[RunbookOutcome]]) -> list[_Job]:
    """Give each outcome its steps; returns the jobs of those to run. A step the key's policy
    forbids is skipped (the policy first, as `check_probe` does); one whose probe the agent does
    not offer is not_offered, with why (`not_offered_reason`)."""
    jobs: list[_Job] = []
    for index, outcomes in enumerate(plans):
        offered = agent_probes(outcomes[0].agent) if outcomes else {}  # a plan is one agent's
        for outcome in outcomes:
            for spec in outcome.runbook.steps:
                step = StepOutcome(spec.probe)
                outcome.steps.append(step)
                if not caller.allows_probe(spec.probe):
                    step.status, step.error = "skipped", "not allowed by your API key's policy"
                elif spec.probe not in offered:
                    step.status, step.error = (
                        "not_offered",
                        not_offered_reason(hub, outcome.agent, spec.probe),
                    )
                else:
                    jobs.append(_Job(index, outcome, step, dict(spec.params)))
    return jobs


def not_offered_reason(hub: Hub, record: AgentRecord, probe: str) -> str:
    """Why a runbook step is not run on this agent: its copy of the pack is older than the hub's."""
    return older_pack(hub, record, probe) or f"agent {record.name} does not offer this probe"


async def run_step(
    hub: Hub, caller: Caller, record: AgentRecord, step: StepOutcome, params: dict[str, Any], via: str
) -> None:
    started, step.asked = time.perf_counter(), True
    try:
        reading = await run_probe_for(hub, caller, record, step.probe, params, via=via, fan_out=True)
    except HubError as exc:
        step.status, step.error, step.code = "error", exc.message, exc.code
    else:
        step.status, step.result = "ok", reading.result
    step.duration_ms = (time.perf_counter() - started) * 1000

"""Runbooks on agents: run a category's probes, turn readings into findings.

`run_runbook` runs one runbook on one agent, its probes concurrently under a
shared limiter. It records each step as it finishes, so when a caller's
deadline cancels it the outcome still holds everything that came back
(the `health_check` partial answer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from sonde.hub.agent_records import AgentRecord
from sonde.hub.errors import HubError
from sonde.hub.probing import run_probe_for
from sonde.packs.runbook import Finding, Runbook

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub


@dataclass
class StepOutcome:
    probe: str
    status: str = "pending"  # ok | error | skipped | timeout | pending
    result: dict[str, Any] | None = None
    error: str | None = None
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
        """Evaluate what came back; mark what did not as timed out."""
        readings = {s.probe: s.result for s in self.steps if s.status == "ok" and s.result is not None}
        self.findings = self.runbook.evaluate(readings)
        for step in self.steps:
            if step.status == "pending":
                step.status, step.error = "timeout", "no answer before the deadline"


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


async def run_step(
    hub: Hub,
    caller: Caller,
    record: AgentRecord,
    step: StepOutcome,
    params: dict[str, Any],
    via: str,
    limiter: trio.CapacityLimiter,
) -> None:
    started = time.perf_counter()
    async with limiter:
        try:
            reading = await run_probe_for(hub, caller, record, step.probe, params, via=via)
        except HubError as exc:
            step.status, step.error = "error", exc.message
        else:
            step.status, step.result = "ok", reading.result
    step.duration_ms = (time.perf_counter() - started) * 1000


async def run_runbook(
    hub: Hub,
    caller: Caller,
    outcome: RunbookOutcome,
    *,
    via: str,
    limiter: trio.CapacityLimiter,
) -> None:
    """Fill ``outcome`` with the runbook's readings and findings; safe to cancel mid-way."""
    record, runbook = outcome.agent, outcome.runbook
    try:
        async with trio.open_nursery() as nursery:
            for spec in runbook.steps:
                step = StepOutcome(spec.probe)
                outcome.steps.append(step)
                if not caller.allows_probe(spec.probe):
                    step.status, step.error = "skipped", "not allowed by your API key's policy"
                    continue
                nursery.start_soon(run_step, hub, caller, record, step, dict(spec.params), via, limiter)
    finally:
        outcome.finish()

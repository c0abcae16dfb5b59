"""A health_check answer stays small on a large fleet: counts cover everything, lists show the worst 50."""

from __future__ import annotations

import time

from sonde.hub.agent_records import AgentRecord
from sonde.hub.diagnostics import RunbookOutcome
from sonde.hub.tools.health import MAX_LISTED, Unreachable, summarize_outcomes
from sonde.packs.runbook import Finding, Runbook


def outcome(i: int, severity: str) -> RunbookOutcome:
    agent = AgentRecord(name=f"web-{i:04d}", public_key="k", enrolled_at=0.0)
    found = RunbookOutcome(agent, Runbook("system", "", ()))
    found.findings.append(Finding(severity, "disk almost full", "/ at 97 %", "system.disk.usage"))  # type: ignore[arg-type]
    return found


def test_a_fleet_worth_of_findings_is_ranked_cut_and_counted() -> None:
    outcomes = [outcome(i, "warning") for i in range(300)] + [outcome(300 + i, "critical") for i in range(3)]
    unreachable = [Unreachable(agent=f"db-{i}", reason="offline") for i in range(80)]
    answer = summarize_outcomes(outcomes, unreachable, time.perf_counter())
    assert len(answer.findings) == MAX_LISTED
    assert [f.severity for f in answer.findings[:3]] == ["critical"] * 3  # the worst are never cut
    assert len(answer.unreachable) == MAX_LISTED
    assert answer.omitted == {"findings": 303 - MAX_LISTED, "unreachable": 80 - MAX_LISTED}
    assert (answer.summary.critical, answer.summary.warning) == (3, 300)
    assert (answer.summary.agents_checked, answer.summary.agents_unreachable) == (303, 80)


def test_a_small_answer_is_whole_and_omits_nothing() -> None:
    answer = summarize_outcomes([outcome(1, "info")], [], time.perf_counter())
    assert len(answer.findings) == 1
    assert answer.omitted == {}

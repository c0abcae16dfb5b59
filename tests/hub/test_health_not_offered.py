"""A runbook step an agent does not offer (its older pack, mid-upgrade) in a health_check answer:
listed apart from the failures, capped like every list, and, as a skipped step, its category incomplete.
tests/e2e/test_older_agent_pack.py drives the same through a real hub and agents."""

from __future__ import annotations

import time

from sonde.hub.agent_records import AgentRecord
from sonde.hub.diagnostics import RunbookOutcome, StepOutcome
from sonde.hub.tools.health import MAX_LISTED, category_status, summarize_outcomes
from sonde.packs.runbook import Runbook

WHY = "its mysql pack (0.0.9) does not have mysql.locks.waits, the hub's (0.1.0) does: ..."


def outcome(name: str, *statuses: str) -> RunbookOutcome:
    agent = AgentRecord(name=name, public_key="k", enrolled_at=0.0)
    steps = [
        StepOutcome(f"mysql.step.s{i}", status=s, error=WHY if s == "not_offered" else None)
        for i, s in enumerate(statuses)
    ]
    return RunbookOutcome(agent, Runbook("mysql", "", ()), steps)


def test_a_step_not_offered_is_neither_run_nor_failed() -> None:
    outcomes = [outcome("new-1", "ok", "ok"), outcome("old-1", "ok", "not_offered")]
    answer = summarize_outcomes(outcomes, [], time.perf_counter())
    assert answer.failed == []
    assert [(n.agent, n.probe, n.reason) for n in answer.not_offered] == [("old-1", "mysql.step.s1", WHY)]
    assert (answer.summary.probes_run, answer.summary.probes_failed) == (3, 0)
    assert [(c.status, c.agents) for c in answer.categories] == [("incomplete", 2)]


def test_a_category_is_what_the_offered_steps_say() -> None:
    assert category_status("mysql", [outcome("a", "ok", "not_offered"), outcome("b", "timeout")]).status == (
        "incomplete"  # b's own timeout, never a's step it does not have
    )
    assert category_status("mysql", [outcome("a", "skipped", "not_offered")]).status == "not_checked"
    nothing_there = category_status("mysql", [outcome("a", "ok"), outcome("b", "not_offered", "not_offered")])
    assert (nothing_there.status, nothing_there.agents) == ("incomplete", 2)
    assert category_status("mysql", [outcome("a", "not_offered")]).status == "not_checked"


def test_a_fleet_of_older_agents_is_listed_cut_and_counted() -> None:
    outcomes = [outcome(f"old-{i:03d}", "ok", "not_offered") for i in range(120)]
    answer = summarize_outcomes(outcomes, [], time.perf_counter())
    assert len(answer.not_offered) == MAX_LISTED
    assert answer.omitted == {"not_offered": 120 - MAX_LISTED}
    assert [c.status for c in answer.categories] == ["incomplete"]


def test_an_answer_with_nothing_not_offered_is_as_before_but_the_empty_list() -> None:
    answer = summarize_outcomes([outcome("new-1", "ok", "error")], [], time.perf_counter()).model_dump()
    assert answer["not_offered"] == []
    assert [f["status"] for f in answer["failed"]] == ["error"]
    assert answer["omitted"] == {}

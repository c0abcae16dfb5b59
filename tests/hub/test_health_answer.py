"""A health_check answer stays small on a large fleet (counts cover everything, lists show the worst
50); the inputs it refuses; and a category status that means what the tool description says."""

from __future__ import annotations

import re
import time

import pytest
from pydantic import ValidationError

from sonde.hub.agent_records import AgentRecord
from sonde.hub.diagnostics import RunbookOutcome, StepOutcome
from sonde.hub.errors import HubError
from sonde.hub.tools.health import (
    HEALTH_CHECK,
    MAX_LISTED,
    HealthCheckInput,
    HealthCheckOutput,
    Unreachable,
    category_status,
    check_agent_tags,
    missing_categories,
    summarize_outcomes,
)
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


# --- the inputs health_check refuses, and what its category status means ------------------


def agent_record(name: str, tags: list[str]) -> AgentRecord:
    return AgentRecord(name=name, public_key="k", enrolled_at=0.0, tags=tags)


def test_a_named_agent_without_the_tags_is_refused_naming_its_tags() -> None:
    check_agent_tags(agent_record("a1", ["prod"]), ["#PROD"])  # carries them: no refusal
    with pytest.raises(HubError) as refused:
        check_agent_tags(agent_record("a2", ["staging"]), ["#prod"])
    assert refused.value.message == (
        "Agent a2 does not carry the tags #prod; its tags: #staging. Drop tags to check a2, "
        "or pick an agent that has them (list_agents with these tags)."
    )
    with pytest.raises(HubError, match="its tags: none"):
        check_agent_tags(agent_record("a3", []), ["prod"])


def test_a_category_no_matching_agent_has_is_refused_or_reported() -> None:
    one, two = [agent_record("a1", [])], [agent_record("a1", []), agent_record("a2", [])]
    offered = {"toolcheck", "system"}
    assert missing_categories([], two, offered) == []
    assert missing_categories(["system", "nosuch", "system", "other"], two, offered) == ["nosuch", "other"]
    with pytest.raises(HubError) as refused:
        missing_categories(["nosuch"], one, offered)
    assert refused.value.code == "not_found"
    assert refused.value.message.startswith(
        "Agent a1 has no 'nosuch' category. Its categories: system, toolcheck."
    )
    with pytest.raises(HubError, match="None of the 2 matching agents has a 'docker' or 'x' category"):
        missing_categories(["docker", "x", "docker"], two, offered)
    assert missing_categories(["nosuch"], [], set()) == []  # no agent matched: agents_checked says so


def test_categories_not_found_is_in_the_answer_and_its_schema() -> None:
    answer = summarize_outcomes([], [], time.perf_counter(), categories_not_found=["nosuch"])
    assert answer.model_dump(mode="json")["categories_not_found"] == ["nosuch"]
    schema = HealthCheckOutput.model_json_schema()
    assert "categories_not_found" in schema["properties"]
    assert "categories_not_found" in HEALTH_CHECK


@pytest.mark.parametrize("agent", ["", "x" * 5000, "dé", "a b", "-a"])
def test_the_optional_agent_is_validated_like_every_other_tools(agent: str) -> None:
    with pytest.raises(ValidationError):
        HealthCheckInput(agent=agent)
    assert HealthCheckInput(agent="web-1.example").agent == "web-1.example"
    assert HealthCheckInput().agent is None


def step(status: str) -> StepOutcome:
    return StepOutcome("system.disk.usage", status=status)


@pytest.mark.parametrize("severity", [None, "info", "warning", "critical"])
@pytest.mark.parametrize(
    "statuses", [("ok", "ok"), ("ok", "skipped"), ("ok", "timeout"), ("skipped", "skipped")]
)
def test_the_category_status_is_what_the_description_says(
    severity: str | None, statuses: tuple[str, str]
) -> None:
    """HEALTH_CHECK states the precedence; category_status must follow exactly that order."""
    stated = re.search(r"the first that applies of ([a-z_ >]+):", " ".join(HEALTH_CHECK.split()))
    assert stated is not None, "the description must state the status precedence"
    precedence = [s.strip() for s in stated[1].split(">")]
    assert precedence == ["critical", "warning", "incomplete", "ok"]
    found = RunbookOutcome(agent_record("a1", []), Runbook("system", "", ()), [step(s) for s in statuses])
    if severity is not None:
        found.findings.append(Finding(severity, "t", "d", "system.disk.usage"))  # type: ignore[arg-type]
    applies = {
        "critical": severity == "critical",
        "warning": severity == "warning",
        "incomplete": any(s != "ok" for s in statuses),
        "ok": True,
    }
    expected = "not_checked" if set(statuses) == {"skipped"} else next(s for s in precedence if applies[s])
    assert category_status("system", [found]).status == expected


def test_a_reading_not_of_its_probes_shape_fails_its_own_step_only() -> None:
    """Regression (a hostile-agent review): an agent answering system.disk.usage with
    ``{"filesystems": [{}]}`` made its runbook raise KeyError in the shared pool, and every
    fleet-wide health_check answered "Internal error"."""
    from sonde.packs.system import PACK

    runbook = PACK.runbooks["system"]
    agent = AgentRecord(name="odd-1", public_key="k", enrolled_at=0.0)
    found = RunbookOutcome(agent, runbook, [StepOutcome(probe) for probe in runbook.probes])
    for step in found.steps:
        step.status, step.result = "ok", {"filesystems": [{}]}
    found.finish()  # raised KeyError: 'mountpoint'
    [disk] = [step for step in found.steps if step.probe == "system.disk.usage"]
    assert (disk.status, disk.code) == ("error", "malformed_reading")
    assert str(disk.error).startswith(
        "the agent's answer does not have system.disk.usage's shape (KeyError: "
    )


def test_steps_never_asked_before_the_deadline_are_counted_apart_not_as_failures() -> None:
    """Regression (3,000 agents): steps still queued at the deadline were told as timeouts, 'no
    answer before the deadline': 7,579 of 9,000 'failed' when the hub had sent some 1,700."""
    agent = AgentRecord(name="web-1", public_key="k", enrolled_at=0.0)
    found = RunbookOutcome(agent, Runbook("system", "", ()))
    asked = StepOutcome("system.disk.usage", asked=True)  # sent, no answer yet
    queued = [StepOutcome(f"system.probe{i}") for i in range(3)]  # its turn had not come
    answered = StepOutcome("system.memory.usage", status="ok", result={}, asked=True)
    found.steps += [answered, asked, *queued]
    found.finish()
    assert [s.status for s in found.steps] == ["ok", "timeout", "not_started", "not_started", "not_started"]
    assert "give a longer deadline_s" in (queued[0].error or "")
    answer = summarize_outcomes([found], [], time.perf_counter())
    summary = answer.summary
    assert (summary.probes_run, summary.probes_succeeded, summary.probes_failed) == (2, 1, 1)
    assert summary.probes_not_started == 3
    assert [(f.probe, f.status) for f in answer.failed] == [("system.disk.usage", "timeout")]
    assert answer.partial
    assert [c.status for c in answer.categories] == ["incomplete"]

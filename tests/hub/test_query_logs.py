"""query_logs: each source maps to a real probe with parameters that probe accepts, a filter
the source cannot apply is refused (never dropped), and the audit source filters before its limit."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from sonde.hub.agent_records import AgentRecord
from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import Hub, open_hub
from sonde.hub.errors import HubError
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.tools.base import LIST_BUDGET_BYTES, ToolCall
from sonde.hub.tools.logs import (
    QueryLogsInput,
    QueryLogsOutput,
    audit_logs,
    journal_since,
    log_probe,
    query_logs,
    since_epoch,
)
from sonde.packs.registry import load_packs
from sonde.params_words import describe_params_error

CASES = [
    {
        "source": "systemd",
        "agent": "a",
        "unit": "nginx.service",
        "priority": "err",
        "since": "15m",
        "grep": "x",
    },
    {"source": "systemd", "agent": "a", "since": "2026-11-22T02:00:00Z", "lines": 5},
    {"source": "docker", "agent": "a", "container": "web", "lines": 50},
    {"source": "nginx", "agent": "a", "kind": "access", "path": "/var/log/nginx/access.log"},
    {"source": "nginx", "agent": "a"},
    {"source": "system", "agent": "a", "path": "/var/log/syslog", "grep": "error"},
]


@pytest.mark.parametrize("arguments", CASES)
def test_each_source_builds_params_its_probe_accepts(arguments: dict[str, object]) -> None:
    probe, params = log_probe(QueryLogsInput.model_validate(arguments))
    spec = load_packs().probe(probe)
    assert spec is not None, probe
    spec.params.model_validate({k: v for k, v in params.items() if v is not None})


def test_missing_targets_say_what_is_needed() -> None:
    with pytest.raises(HubError, match="needs a container"):
        log_probe(QueryLogsInput(source="docker", agent="a"))
    with pytest.raises(HubError, match="needs a path"):
        log_probe(QueryLogsInput(source="system", agent="a"))


def test_journal_since_forms() -> None:
    assert journal_since("15m") == "-15m"
    assert journal_since("2026-11-22T02:00:00Z") == "2026-11-22 02:00:00 UTC"  # not the agent's local time
    assert journal_since("2026-11-22T02:00:00") == "2026-11-22 02:00:00"


# --- since: every form the schema admits works, or is refused at validation (bug 1) ---------

GOOD_SINCE = [
    "90s",
    "15m",
    "2h",
    "1d",
    "10000d",  # about 27 years: the longest, journalctl refusing a time before 1970
    "99999h",
    "1970-01-01T00:00Z",
    "2026-11-25T14:30",
    "2026-11-25 14:30:05",
    "2024-02-29T00:00Z",
]
BAD_SINCE = [
    "2026-13-45T99:99:99Z",
    "2026-11-25T::::::",
    "2026-02-29T00:00",
    "2026-11-25T24:00",
    "100000m",
    "15",
    "99999d",  # '-99999d' is before 1970: journalctl refuses it
    "10001d",
    "1969-12-31T23:59:59Z",
    "9999-12-31T00:00Z",
]


@pytest.mark.parametrize("since", BAD_SINCE)
def test_a_since_that_is_no_real_time_is_refused_naming_the_forms(since: str) -> None:
    with pytest.raises(
        ValidationError,
        match=r"since .* is no real date and time in reach: since must be a duration .* or an ISO time",
    ) as caught:
        QueryLogsInput.model_validate({"source": "audit", "since": since})
    assert caught.value.errors()[0]["loc"] == ("since",)


@pytest.mark.parametrize("since", GOOD_SINCE)
def test_every_accepted_since_has_a_time_and_a_journal_form(since: str) -> None:
    for source in ("audit", "systemd"):
        args = QueryLogsInput.model_validate({"source": source, "agent": "a", "since": since})
        assert isinstance(since_epoch(args.since), float)
    _, params = log_probe(args)
    spec = load_packs().probe("systemd.journal.query")
    assert spec is not None
    spec.params.model_validate({k: v for k, v in params.items() if v is not None})


def test_the_schema_advertises_a_since_pattern_the_good_forms_match() -> None:
    since = QueryLogsInput.model_json_schema()["properties"]["since"]
    pattern = next(branch["pattern"] for branch in since["anyOf"] if branch.get("type") == "string")
    assert all(re.fullmatch(pattern, good) for good in GOOD_SINCE)
    assert not re.fullmatch(pattern, "2026-11-25T::::::")


# --- since and grep: used where the probe can, refused where it cannot (bugs 2, 3) ----------

UNSUPPORTED = [
    ({"source": "docker", "container": "web", "since": "1h"}, "since", "systemd, audit"),
    ({"source": "nginx", "since": "1h"}, "since", "systemd, audit"),
    ({"source": "system", "path": "/var/log/syslog", "since": "1h"}, "since", "systemd, audit"),
    ({"source": "docker", "container": "web", "grep": "x"}, "grep", "systemd, system, audit"),
    ({"source": "nginx", "kind": "access", "grep": "x"}, "grep", "systemd, system, audit"),
    ({"source": "docker", "container": "web", "unit": "nginx.service"}, "unit", "systemd"),
    ({"source": "audit", "priority": "err"}, "priority", "systemd"),
    ({"source": "systemd", "container": "web"}, "container", "docker"),
    ({"source": "system", "path": "/var/log/syslog", "kind": "access"}, "kind", "nginx"),
    ({"source": "audit", "path": "/var/log/syslog"}, "path", "system, nginx"),
]


@pytest.mark.parametrize(("arguments", "name", "supported"), UNSUPPORTED)
def test_a_filter_the_source_cannot_apply_is_refused(
    arguments: dict[str, object], name: str, supported: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        QueryLogsInput.model_validate({"agent": "a", **arguments})
    message = str(caught.value)
    assert f"has no {name} filter" in message
    assert f"only sources {supported} support {name}" in message


def test_a_supported_filter_reaches_the_probe() -> None:
    _, journal = log_probe(QueryLogsInput(source="systemd", agent="a", since="2h", grep="oom"))
    assert (journal["since"], journal["grep"]) == ("-2h", "oom")
    _, system = log_probe(QueryLogsInput(source="system", agent="a", path="/var/log/syslog", grep="oom"))
    assert system["contains"] == "oom"


# --- through an in-process hub: the audit source and agents without a pack (bugs 4, 5) ------

ADMIN = caller_for(ApiKeyRecord(id="k-admin", name="admin", prefix="sonde_x", role="admin", created_at=0.0))


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[Hub]:
    async with open_hub(HubConfig(data_dir=tmp_path)) as opened:
        yield opened


async def audit_answer(hub: Hub, **arguments: object) -> QueryLogsOutput:
    return await audit_logs(
        ToolCall(hub, ADMIN), QueryLogsInput.model_validate({"source": "audit", **arguments})
    )


async def test_audit_grep_filters_before_the_limit(hub: Hub) -> None:
    for i in range(30):
        probe = "system.info" if i % 3 == 0 else "system.cpu.usage"
        await hub.audit("k-admin", "mcp.probe", f"web-{i}", "ok", detail={"probe": probe})
    for _ in range(10):
        await hub.audit("k-admin", "mcp.call.list_agents", None, "ok")
    few = await audit_answer(hub, grep="system.info", lines=5)
    assert few.audit is not None
    assert [e.target for e in few.audit] == ["web-27", "web-24", "web-21", "web-18", "web-15"]
    assert few.truncated is True
    every = await audit_answer(hub, grep="system.info", lines=1000)
    assert every.audit is not None
    assert (len(every.audit), every.truncated) == (10, False)
    exact = await audit_answer(hub, grep="system.info", lines=10)
    assert exact.audit is not None
    assert (len(exact.audit), exact.truncated) == (10, False)


async def test_audit_grep_matches_every_text_field(hub: Hub) -> None:
    await hub.audit("k-ops", "mcp.call.probe", "db-7", "forbidden", detail={"why": 'the "café" key'})
    await hub.audit("k-admin", "mcp.call.list_agents", None, "ok")
    for text in ("k-ops", "call.probe", "db-7", "forbidden", '"café"', "why"):
        found = await audit_answer(hub, grep=text)
        assert found.audit is not None
        assert [e.target for e in found.audit] == ["db-7"], text
    assert (await audit_answer(hub, grep="DB-7")).audit == []


async def test_a_source_whose_pack_the_agent_lacks_names_the_sources_it_has(hub: Hub) -> None:
    packs = [{"name": "system", "version": "1", "probes": [{"name": "system.logs.tail"}]}]
    hub.fleet.remember(AgentRecord(name="a1", public_key="x", enrolled_at=0.0, packs=packs))
    with pytest.raises(HubError) as caught:
        await query_logs(ToolCall(hub, ADMIN), QueryLogsInput(source="systemd", agent="a1"))
    message = str(caught.value)
    assert (
        "Agent a1 does not run the systemd pack (it is not installed there, or it does not apply: `sonde packs list` on a1 says why), so source='systemd' is not available there"
        in message
    )
    assert "Sources available on a1: system, audit." in message
    assert "probe" not in message


def test_a_refused_since_says_what_is_wrong_before_the_answer_cuts_it() -> None:
    """Regression: said back through describe_params_error (cut at 200 characters then), the refusal
    ended in the middle of the forms, before it said what was wrong with the value."""
    with pytest.raises(ValidationError) as caught:
        QueryLogsInput.model_validate({"source": "audit", "since": "9999-12-31T23:59:59Z"})
    said = describe_params_error(caught.value)
    assert said.startswith("since: since '9999-12-31T23:59:59Z' is no real date and time in reach: ")
    assert "Value error" not in said
    assert said.endswith("from 1970-01-01 to 9999-12-30")  # whole


async def test_a_thousand_audit_lines_are_cut_to_the_answer_budget_newest_kept(hub: Hub) -> None:
    """Regression (3,000 agents): `query_logs {source: audit, lines: 1000}` answered 190,898
    characters, past what clients take from a tool."""
    for i in range(1000):
        await hub.audit(
            "k-admin", "mcp.probe", f"web-{i:04d}", "ok", detail={"probe": "system.info", "n": "x" * 150}
        )
    answer = await audit_answer(hub, lines=1000)
    assert answer.audit is not None
    assert answer.truncated is True
    assert 100 < len(answer.audit) < 1000
    assert answer.audit[0].target == "web-0999"  # the newest are kept
    assert len(answer.model_dump_json()) <= LIST_BUDGET_BYTES + 1024

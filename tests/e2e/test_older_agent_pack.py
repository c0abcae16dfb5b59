"""Mid-upgrade, an agent whose pack is older than the hub's is not asked for the probes it lacks.

A real hub and two real agents. The hub and ``new-1`` have the test-only ``rollout`` pack 0.0.2;
``old-1`` has ``rollout`` 0.0.1, as an agent not yet upgraded would: the same pack, one probe
fewer, which its register describes. The hub's (newer) runbooks name that probe: the ``rollout``
category in one of its two steps, the ``rollfresh`` category (new in 0.0.2) in its only one.

health_check tried every step on every agent: the probe old-1 lacks was refused as unknown
there (`check_probe`, from its register), listed as failed, and made the category incomplete
for the whole fleet. Such a step is now not run: it is listed in not_offered, with why, not as a
failure; its category is incomplete, as for a step the key's policy skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until
from tests.testpacks import install_test_pack

OLD_PACK = '''
"""Test-only: rollout 0.0.1, one probe and one runbook step."""
from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.runbook import Finding, Runbook, RunbookStep

PACK = Pack("rollout", "0.0.1", "Test-only: a pack whose newer version has one probe more.")


class Value(Result):
    value: int


@PACK.probe("rollout.state.read", "In every version of the pack.")
async def read_state(ctx, params: NoParams) -> Value:
    return Value(value=1)


def nothing(reading):
    return []


def checked(reading):
    return [Finding("info", "rollout newer checked", "the newer probe answered", "rollout.state.newer")]
'''

NEW_PACK = (
    OLD_PACK.replace('"0.0.1"', '"0.0.2"').replace("rollout 0.0.1, one probe", "rollout 0.0.2, two probes")
    + """

@PACK.probe("rollout.state.newer", "New in 0.0.2.")
async def read_newer(ctx, params: NoParams) -> Value:
    return Value(value=2)


PACK.runbooks["rollfresh"] = Runbook(
    "rollfresh", "New in 0.0.2.", (RunbookStep("rollout.state.newer", checked),)
)
"""
)

OLD_RUNBOOK = """
PACK.runbooks["rollout"] = Runbook("rollout", "The pack's state.", (RunbookStep("rollout.state.read", nothing),))
"""

NEW_RUNBOOK = """
PACK.runbooks["rollout"] = Runbook(
    "rollout",
    "The pack's state.",
    (RunbookStep("rollout.state.read", nothing), RunbookStep("rollout.state.newer", nothing)),
)
"""

CATEGORIES = ["rollfresh", "rollout"]
WHY = (
    "its rollout pack (0.0.1) does not have rollout.state.newer, the hub's (0.0.2) does: "
    "an older Sonde or rollout pack runs there; upgrade it on old-1"
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    tmp = tmp_path_factory.mktemp("older-pack")
    new_site = install_test_pack(tmp / "site-new", "rollout", NEW_PACK + NEW_RUNBOOK)
    old_site = install_test_pack(tmp / "site-old", "rollout", OLD_PACK + OLD_RUNBOOK)
    with running_hub(tmp, "--heartbeat-interval", "1", site=new_site) as running:
        agents = [
            enroll_agent(running, tmp, "new-1", new_site),
            enroll_agent(running, tmp, "old-1", old_site),
        ]
        for agent in agents:
            agent.start()
        try:
            wait_until(lambda: running.statuses() == {"new-1": "online", "old-1": "online"}, timeout=30)
            yield running
        finally:
            for agent in agents:
                agent.stop()


def test_the_older_agent_describes_one_probe_fewer(hub: RunningHub) -> None:
    """The premise: each agent's register describes its own copy of the pack."""
    with hub.client() as http:
        agents = {a["name"]: a for a in http.get("/api/v1/agents").json()["agents"]}
    assert "rollout@0.0.2" in agents["new-1"]["packs"]
    assert "rollout@0.0.1" in agents["old-1"]["packs"]


async def test_health_check_lists_a_probe_the_older_pack_lacks_as_not_offered(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:  # the real client checks the output schema
        report = await call(client, "health_check", categories=CATEGORIES)
    assert report["failed"] == []
    assert report["not_offered"] == [
        {"agent": "old-1", "probe": "rollout.state.newer", "reason": WHY},  # the rollfresh step
        {"agent": "old-1", "probe": "rollout.state.newer", "reason": WHY},  # the rollout step
    ]
    # a step not run on old-1 leaves each category incomplete, as a skipped one does (not ok: a
    # downgraded pack would read as all well), never failed
    assert report["categories"] == [
        {"category": "rollfresh", "status": "incomplete", "agents": 2},
        {"category": "rollout", "status": "incomplete", "agents": 2},
    ]
    assert [(f["agent"], f["title"]) for f in report["findings"]] == [("new-1", "rollout newer checked")]
    summary = report["summary"]
    assert (summary["probes_run"], summary["probes_succeeded"], summary["probes_failed"]) == (4, 4, 0)
    assert summary["agents_checked"] == 2
    assert report["skipped"] == []
    assert report["partial"] is False
    assert report["omitted"] == {}


async def test_an_up_to_date_agents_answer_keeps_its_shape(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        report = await call(client, "health_check", agent="new-1", categories=CATEGORIES)
    assert list(report) == [
        "summary",
        "findings",
        "unreachable",
        "categories",
        "skipped",
        "failed",
        "not_offered",
        "partial",
        "categories_not_found",
        "omitted",
    ]
    assert report["not_offered"] == []
    assert report["failed"] == []
    assert [c["status"] for c in report["categories"]] == ["ok", "ok"]


def test_the_rest_health_check_answers_the_same(hub: RunningHub) -> None:
    with hub.client() as http:
        answer = http.post("/api/v1/health-check", json={"agent": "old-1", "categories": CATEGORIES})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["failed"] == []
    assert [(n["agent"], n["probe"]) for n in report["not_offered"]] == [("old-1", "rollout.state.newer")] * 2
    # rollfresh: nothing of it on old-1 to run; rollout: one of its two steps answered
    assert report["categories"] == [
        {"category": "rollfresh", "status": "not_checked", "agents": 1},
        {"category": "rollout", "status": "incomplete", "agents": 1},
    ]


async def test_diagnose_runs_what_the_older_agent_offers_and_says_why_not_the_rest(hub: RunningHub) -> None:
    async with mcp_client(hub.url, hub.admin_key) as client:
        answer = await call(client, "diagnose", agent="old-1", category="rollout")
        fresh = await call_error(client, "diagnose", agent="old-1", category="rollfresh")
        probed = await call_error(client, "probe", agent="old-1", probe="rollout.state.newer")
    readings = {r["probe"]: (r["status"], r["error"]) for r in answer["readings"]}
    assert readings == {"rollout.state.read": ("ok", None), "rollout.state.newer": ("not_offered", WHY)}
    assert answer["complete"] is False  # as health_check's category: not all of it was checked
    assert fresh == f"Agent old-1 offers none of the 'rollfresh' category's probes: {WHY}."
    assert probed.startswith(
        f"Unknown probe 'rollout.state.newer' on agent old-1. {WHY[0].upper()}{WHY[1:]}. "
    )
    assert "Available: " in probed


async def test_list_capabilities_and_agent_overview_offer_only_what_the_agent_can_run(
    hub: RunningHub,
) -> None:
    """Regression: both listed rollfresh for old-1, whose pack has none of its probes, sending a
    model into diagnose's refusal (above)."""
    async with mcp_client(hub.url, hub.admin_key) as client:
        listed = await call(client, "list_capabilities")
        old = await call(client, "agent_overview", agent="old-1")
        new = await call(client, "agent_overview", agent="new-1")
    categories = {a["agent"]: a["categories"] for a in listed["agents"]}
    assert "rollfresh" in categories["new-1"]
    assert "rollfresh" not in categories["old-1"]
    assert "rollout" in categories["old-1"]  # one of its two steps: diagnose runs that one
    assert "rollfresh" not in old["categories"]
    assert "rollfresh" in new["categories"]

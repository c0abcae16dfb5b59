"""What one API key is shown, through the shared fleet's real hub and agents and the real mcp client.

- agent_overview's recent probes are the newest probes that key may see, however many other
  calls name the agent; a member key sees only its own, as in query_logs' audit source;
- list_capabilities and agent_overview list only the categories the key can run;
- health_check with no agent for the key to check is refused, never an empty all-clear;
- an unknown probe's answer lists only the probes the key may run, and a probe outside its
  policy is refused alike whether the agent has it or not (REST and MCP).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sonde.packs.registry import load_packs
from tests.conftest import require
from tests.e2e.harness import SharedFleet
from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import RunningHub, running_hub

pytestmark = pytest.mark.e2e


def member_key(hub: RunningHub, name: str, agents: list[str], probes: list[str]) -> str:
    """A member key made over REST, with this policy; returns its secret."""
    body = {"name": name, "role": "member", "policy": {"agents": agents, "probes": probes}}
    with hub.client() as http:
        created = http.post("/api/v1/api-keys", json=body)
    assert created.status_code == 201, created.text
    secret: str = created.json()["secret"]
    return secret


def probe_values(overview: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(p["probe"], p["by_you"]) for p in overview["recent_probes"]]


async def test_recent_probes_reach_past_the_calls_that_are_not_probes(fleet: SharedFleet) -> None:
    """Before: the newest 200 rows naming the agent were read, then filtered: 205 other calls hid every probe."""
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        for value in (1, 2, 3):
            await call(client, "probe", agent="alpha", probe="e2e.echo.value", params={"value": value})
        for _ in range(205):
            await call(client, "agent_overview", agent="alpha", recent=0)
        overview = await call(client, "agent_overview", agent="alpha", recent=3)
    assert probe_values(overview) == [("e2e.echo.value", True)] * 3
    assert [p["action"] for p in overview["recent_probes"]] == ["mcp.probe"] * 3


async def test_a_member_key_sees_only_its_own_probes_as_in_the_audit_source(fleet: SharedFleet) -> None:
    """Before: agent_overview showed a member other keys' probes (by_you false) that query_logs hid."""
    hub = fleet.hub
    mine = member_key(hub, "overview-mine", ["alpha"], ["e2e.*", "system.memory.*"])
    theirs = member_key(hub, "overview-theirs", ["alpha"], ["e2e.*", "system.memory.*"])
    async with mcp_client(hub.url, mine) as client:
        await call(client, "probe", agent="alpha", probe="system.memory.usage")
    async with mcp_client(hub.url, theirs) as client:
        await call(client, "probe", agent="alpha", probe="e2e.echo.value", params={"value": 9})
    async with mcp_client(hub.url, hub.admin_key) as client:
        await call(client, "probe", agent="alpha", probe="e2e.echo.value", params={"value": 10})
        everyone = await call(client, "agent_overview", agent="alpha", recent=3)
    assert probe_values(everyone) == [
        ("e2e.echo.value", True),  # the admin's own
        ("e2e.echo.value", False),  # the other member's
        ("system.memory.usage", False),  # this member's
    ]
    async with mcp_client(hub.url, mine) as client:
        overview = await call(client, "agent_overview", agent="alpha", recent=10)
        audit = await call(client, "query_logs", source="audit", agent="alpha", lines=100)
    assert probe_values(overview) == [("system.memory.usage", True)]
    actors = {entry["actor"] for entry in audit["audit"]}
    assert len(actors) == 1  # its own calls only, there too


def runnable(category: str, probes: list[str]) -> bool:
    """Whether a key allowed exactly ``probes`` (names, no globs) can run any of ``category``'s probes."""
    runbooks = {cat: rb for pack in load_packs().packs.values() for cat, rb in pack.runbooks.items()}
    return any(probe in probes for probe in runbooks[category].probes)


async def test_only_the_categories_a_key_can_run_are_listed(fleet: SharedFleet) -> None:
    """Before: every category of the agent's packs, and diagnose then refused the ones the key runs none of."""
    hub = fleet.hub
    echo_only = member_key(hub, "categories-echo", ["alpha"], ["e2e.*"])
    memory_only = member_key(hub, "categories-memory", ["alpha"], ["system.memory.usage"])
    async with mcp_client(hub.url, echo_only) as client:
        caps = await call(client, "list_capabilities")
        overview = await call(client, "agent_overview", agent="alpha", recent=0)
        assert [a["agent"] for a in caps["agents"]] == ["alpha"]
        assert caps["agents"][0]["categories"] == []
        assert caps["categories"] == []
        assert 'list_capabilities(probes=["e2e.' in caps["note"], caps["note"]  # a probe it may run
        assert overview["categories"] == []
        assert "allows none of" in await call_error(client, "diagnose", agent="alpha", category="system")
    async with mcp_client(hub.url, memory_only) as client:
        caps = await call(client, "list_capabilities")
        overview = await call(client, "agent_overview", agent="alpha", recent=0)
        assert caps["agents"][0]["categories"] == ["system"]
        assert 'list_capabilities(probes=["system.memory.usage"])' in caps["note"], caps["note"]
        assert [c["category"] for c in caps["categories"]] == ["system"]
        assert overview["categories"] == ["system"]
        diagnosed = await call(client, "diagnose", agent="alpha", category="system")
        assert {r["probe"] for r in diagnosed["readings"] if r["status"] == "ok"} == {"system.memory.usage"}
    async with mcp_client(hub.url, hub.admin_key) as client:  # an admin key runs every probe
        every = (await call(client, "agent_overview", agent="alpha", recent=0))["categories"]
    assert "system" in every
    assert [c for c in every if runnable(c, ["system.memory.usage"])] == ["system"]


async def test_health_check_with_no_agent_the_key_can_reach_is_refused(fleet: SharedFleet) -> None:
    """Before: success with agents_checked 0 and no categories, which reads as an all-clear."""
    hub = fleet.hub
    nobody = member_key(hub, "health-nobody", ["zzz-*"], [])
    async with mcp_client(hub.url, nobody) as client:
        assert (await call(client, "list_agents"))["agents"] == []
        for arguments in ({}, {"categories": ["system"]}, {"categories": ["nosuch"]}):
            refused = await call_error(client, "health_check", **arguments)
            assert refused.startswith("No agent you can reach to check"), (arguments, refused)
            assert "list_agents" in refused
            assert "zzz-*" in refused  # the key's policy, as a policy refusal names it
        tagged = await call_error(client, "health_check", tags=["prod"])
        assert tagged.startswith("No agent you can reach carries the tags #prod.")  # as before


async def test_health_check_on_an_empty_fleet_is_refused(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        async with mcp_client(hub.url, hub.admin_key) as client:
            refused = await call_error(client, "health_check", categories=["system"])
    assert refused.startswith("No agent you can reach to check")
    assert "none is enrolled" in refused


def probe_refusal(hub: RunningHub, key: str, probe: str) -> tuple[int, str, str]:
    """``POST /api/v1/probe`` on alpha that must fail: its status, code and message."""
    with hub.client(key) as http:
        answer = http.post("/api/v1/probe", json={"agent": "alpha", "probe": probe, "params": {}})
    assert answer.status_code >= 400, answer.text
    error = answer.json()["error"]
    return answer.status_code, error["code"], error["message"]


def listed_probes(message: str) -> set[str]:
    """The probe names after 'Available: ' in an unknown probe's message."""
    return set(message.split("Available: ", 1)[1].split(". Call ", 1)[0].split(", "))


async def test_an_unknown_probe_lists_only_the_probes_the_key_may_run(fleet: SharedFleet) -> None:
    """Before: 'Available: e2e.echo.value, mysql.databases.sizes, ..., postgres.replication.status, ...',
    every probe of the agent, which list_capabilities and GET /api/v1/packs hide from this key."""
    hub = fleet.hub
    key = member_key(hub, "unknown-probe-system", ["alpha"], ["system.*"])
    async with mcp_client(hub.url, key) as client:
        caps = await call(client, "list_capabilities")
        mcp_text = await call_error(client, "probe", agent="alpha", probe="system.nope")
    may_run = {name for pack in caps["agents"][0]["packs"] for name in pack["probes"]}
    assert "system.memory.usage" in may_run
    assert all(name.startswith("system.") for name in may_run)
    status, code, rest_text = probe_refusal(hub, key, "system.nope")
    assert (status, code) == (404, "not_found")
    assert listed_probes(rest_text) == listed_probes(mcp_text) == may_run


async def test_a_probe_outside_the_policy_reads_alike_whether_the_agent_has_it_or_not(
    fleet: SharedFleet,
) -> None:
    """Before: a probe the agent has answered 403 naming the policy, one it lacks 404: a key learned
    which of the probes hidden from it (list_capabilities, GET /api/v1/packs) the agent offers.
    A probe outside the policy is refused as such (403, as SECURITY.md says), existing or not."""
    hub = fleet.hub
    key = member_key(hub, "hidden-probe-system", ["alpha"], ["system.*"])
    pairs = [("e2e.echo.value", "e2e.nope"), ("postgres.replication.status", "postgres.nope")]
    for offered, missing in pairs:
        status, code, message = probe_refusal(hub, key, offered)
        assert (status, code) == (403, "forbidden"), message
        assert probe_refusal(hub, key, missing) == (status, code, message.replace(offered, missing))
        async with mcp_client(hub.url, key) as client:
            said = await call_error(client, "probe", agent="alpha", probe=offered)
            unknown = await call_error(client, "probe", agent="alpha", probe=missing)
        assert unknown == said.replace(offered, missing)


async def test_a_probe_of_a_pack_the_agent_does_not_run_says_so(fleet: SharedFleet) -> None:
    """Before: 'Unknown probe 'systemd.units.failed' on agent alpha. Available: ...', as for a
    misspelt name, where the hub knows the pack: not installed on alpha, or it does not apply."""
    hub = fleet.hub
    probes = {
        "systemd": "systemd.units.failed",
        "docker": "docker.containers.list",
        "nginx": "nginx.config.test",
    }
    async with mcp_client(hub.url, hub.admin_key) as client:
        listed = await call(client, "list_agents", name="alpha")
        runs = {label.split("@")[0] for label in listed["agents"][0]["packs"]}
        missing = [pack for pack in probes if pack not in runs]
        require(bool(missing), "alpha runs the systemd, docker and nginx packs: none is left out here")
        said = await call_error(client, "probe", agent="alpha", probe=probes[missing[0]])
    assert said.startswith(f"Unknown probe '{probes[missing[0]]}' on agent alpha. Agent alpha does not run")
    assert f"the {missing[0]} pack: it is not installed there, or it does not apply" in said
    assert "(`sonde packs list` on alpha says why). Available: " in said
    misspelt = probe_refusal(hub, hub.admin_key, "system.nope")[2]
    assert "does not run" not in misspelt  # alpha runs the system pack: just an unknown probe
    typo = probe_refusal(hub, hub.admin_key, "system.memory.usag")[2]
    assert typo.startswith(
        "Unknown probe 'system.memory.usag' on agent alpha. Did you mean system.memory.usage? Available: "
    )
    absent = probe_refusal(hub, hub.admin_key, probes[missing[0]])[2]
    assert "Did you mean" not in absent  # a pack it does not run: no look-alike offered instead

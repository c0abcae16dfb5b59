"""End to end, probes through the real mcp client: validation, correlation, cancellation, restarts.

The session's shared fleet (a `sonde hub`, agents ``alpha`` and ``beta``
offering the test-only ``e2e`` pack) serves every test but the hub restart,
which kills its own hub.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from tests.e2e.harness import (
    SharedFleet,
    agent_identity,
    audit_rows,
    descendants_running,
    enroll_named,
    eventually,
    status_of,
)
from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import URL_LINE, running_hub, spawn, wait_until
from tests.subprocs import NOT_UTF8_SHOWN, process_named_not_utf8

pytestmark = pytest.mark.e2e

SLEEP_ARGV = ["sleep", "300"]
CONCURRENT_PROBES = 200


def probes_sent(fleet: SharedFleet, agent: str, probes: set[str]) -> list[dict[str, Any]]:
    """The audit's record of the probes the hub sent to ``agent``, among ``probes``."""
    rows = [
        {**row, "detail": json.loads(row["detail"] or "{}")} for row in audit_rows(fleet.hub, "mcp.probe")
    ]
    return [row for row in rows if row["target"] == agent and row["detail"].get("probe") in probes]


async def test_invalid_params_and_unknown_probes_never_reach_the_agent(fleet: SharedFleet) -> None:
    hub = fleet.hub
    watched = {"system.cpu.usage", "system.nope.missing"}
    sent_before = len(probes_sent(fleet, "beta", watched))
    async with mcp_client(hub.url, hub.admin_key) as client:
        too_long = await call_error(
            client, "probe", agent="beta", probe="system.cpu.usage", params={"interval_s": 99}
        )
        assert "interval_s" in too_long
        unknown_field = await call_error(
            client, "probe", agent="beta", probe="system.cpu.usage", params={"interval_s": 0, "bogus": 1}
        )
        assert "bogus" in unknown_field
        unknown = await call_error(client, "probe", agent="beta", probe="system.nope.missing")
        assert "Available:" in unknown
        assert "system.memory.usage" in unknown
        assert "e2e.echo.value" in unknown
        # a pack the hub lacks is validated by the agent, which names the field too
        agent_side = await call_error(
            client, "probe", agent="beta", probe="e2e.echo.value", params={"value": -1}
        )
        assert "value" in agent_side

        reading = await call(
            client, "probe", agent="beta", probe="system.cpu.usage", params={"interval_s": 0}
        )
        assert reading["result"]["interval_s"] == 0

    # only the valid call went out (the audit records every probe sent to an agent)
    await eventually(lambda: len(probes_sent(fleet, "beta", watched)) > sent_before)
    sent = probes_sent(fleet, "beta", watched)[sent_before:]
    assert [(row["detail"]["probe"], row["detail"]["params"], row["outcome"]) for row in sent] == [
        ("system.cpu.usage", {"interval_s": 0}, "ok")
    ]


async def test_what_a_caller_sends_is_kept_in_the_audit_log_only_up_to_a_bound(fleet: SharedFleet) -> None:
    """An MCP body may be 4 MiB: an agent name or params that long must not go whole into an audit row."""
    hub = fleet.hub
    long_name = "x" * 5000
    big = "v" * 100_000
    async with mcp_client(hub.url, hub.admin_key) as client:
        assert "agent" in await call_error(client, "probe", agent=long_name, probe="system.cpu.usage")
        # a pack the hub lacks: the params go to the agent as sent, and the agent refuses them
        assert "value" in await call_error(
            client, "probe", agent="beta", probe="e2e.echo.value", params={"value": big}
        )
    await eventually(
        lambda: any(r["target"] and r["target"].startswith("x") for r in audit_rows(hub, "mcp.call.probe"))
    )
    (named,) = [r for r in audit_rows(hub, "mcp.call.probe") if r["target"] and r["target"].startswith("x")]
    assert named["target"] == "x" * 200 + "..."
    await eventually(
        lambda: any(
            r["detail"].get("probe") == "e2e.echo.value"
            for r in probes_sent(fleet, "beta", {"e2e.echo.value"})
        )
    )
    (sent,) = [
        r for r in probes_sent(fleet, "beta", {"e2e.echo.value"}) if "omitted" in json.dumps(r["detail"])
    ]
    size = len(json.dumps({"value": big}))
    assert sent["detail"]["params"] == {"omitted": f"{size} bytes of JSON, over the 4096 an audit row keeps"}
    assert sent["detail"]["probe"] == "e2e.echo.value"
    assert len(sent["detail"]["error"]) < 4096


async def test_a_process_named_in_bytes_that_are_not_utf8_does_not_take_the_agent_down(
    fleet: SharedFleet, tmp_path: Path
) -> None:
    # Before: UnicodeEncodeError while sizing the result, out of the probe runner: the agent process died.
    agent = sorted(fleet.agents)[0]
    with process_named_not_utf8(tmp_path) as sleeper:
        async with mcp_client(fleet.hub.url, fleet.hub.admin_key) as client:
            info = await call(
                client, "probe", agent=agent, probe="system.process.info", params={"pid": sleeper.pid}
            )
            assert info["result"]["name"] == NOT_UTF8_SHOWN
            assert info["result"]["cmdline"][0].endswith("/" + NOT_UTF8_SHOWN)
            again = await call(client, "probe", agent=agent, probe="system.memory.usage")
            assert again["result"]["total_bytes"] > 0
    assert status_of(fleet.hub, agent) == "online"


async def test_concurrent_probes_come_back_to_their_callers(fleet: SharedFleet) -> None:
    hub = fleet.hub
    names = sorted(fleet.agents)
    pids = {name: agent.proc.popen.pid for name, agent in fleet.agents.items() if agent.proc is not None}
    ids = {name: agent_identity(agent)[0] for name, agent in fleet.agents.items()}
    answers: dict[int, dict[str, Any]] = {}

    async def probe_one(client: Any, i: int) -> None:
        agent = names[i % len(names)]
        if i % 10 >= 8:  # both agents get some
            answers[i] = await call(client, "probe", agent=agent, probe="system.memory.usage")
        else:
            answers[i] = await call(client, "probe", agent=agent, probe="e2e.echo.value", params={"value": i})

    async with mcp_client(hub.url, hub.admin_key) as client:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for i in range(CONCURRENT_PROBES):
                    nursery.start_soon(probe_one, client, i)

    assert len(answers) == CONCURRENT_PROBES
    for i, answer in answers.items():
        agent = names[i % len(names)]
        assert answer["agent"] == agent
        assert answer["agent_id"] == ids[agent]
        if i % 10 >= 8:
            assert answer["result"]["total_bytes"] > 0
        else:
            assert answer["result"] == {"value": i, "pid": pids[agent]}, (i, agent)


async def test_cancelled_probe_kills_its_subprocess(fleet: SharedFleet) -> None:
    hub = fleet.hub
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    agent_pid = alpha.proc.popen.pid
    assert not descendants_running(agent_pid, SLEEP_ARGV)

    async with mcp_client(hub.url, hub.admin_key) as client:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.call_tool, "probe", {"agent": "alpha", "probe": "e2e.sleep.long"})
            await eventually(lambda: bool(descendants_running(agent_pid, SLEEP_ARGV)))
            nursery.cancel_scope.cancel()  # the MCP client gives up on the call

        took = await eventually(lambda: not descendants_running(agent_pid, SLEEP_ARGV), timeout_s=10)
        assert took < 5
        # the agent is still healthy, on the same connection
        reading = await call(client, "probe", agent="alpha", probe="e2e.echo.value", params={"value": 7})
        assert reading["result"] == {"value": 7, "pid": agent_pid}
    assert alpha.proc.popen.poll() is None
    assert status_of(hub, "alpha") == "online"
    await eventually(
        lambda: any(
            json.loads(row["detail"])["probe"] == "e2e.sleep.long" and row["outcome"] == "cancelled"
            for row in audit_rows(hub, "mcp.probe")
        )
    )


async def test_agent_reconnects_to_a_restarted_hub(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_named(hub, tmp_path / "home-phoenix", "phoenix")
        agent.start()
        assert agent.proc is not None
        wait_until(lambda: status_of(hub, "phoenix") == "online")
        port = urlsplit(hub.url).port
        hub.proc.stop(signal.SIGKILL)

        # the agent keeps trying (a failed attempt, then the next) and does not give up
        agent.proc.wait_for(re.compile(r"reconnecting to \S+ in [0-9.]+s \(attempt 2\)"), timeout=15)
        assert agent.proc.popen.poll() is None

        again = spawn(["hub", "--bind", f"127.0.0.1:{port}", "--data-dir", str(hub.data_dir)], hub.env)
        try:
            assert again.wait_for(URL_LINE).group(1) == hub.url
            wait_until(lambda: status_of(hub, "phoenix") == "online", timeout=60)
            async with mcp_client(hub.url, hub.admin_key) as client:
                reading = await call(client, "probe", agent="phoenix", probe="system.memory.usage")
            assert reading["result"]["total_bytes"] > 0
            assert agent.stop() == 0
        finally:
            again.stop()


async def test_the_hub_process_freezes_start_up_objects_and_governs_full_collections(
    fleet: SharedFleet,
) -> None:
    # sonde.hub.gc_policy: without it, full collections over 10,000 agents stalled the hub for seconds
    line = fleet.hub.proc.wait_for(
        re.compile(r"garbage collection: (\d+) start-up objects frozen"), timeout=10
    )
    assert int(line.group(1)) > 10_000


async def test_a_member_key_cannot_take_an_agents_last_probe_slots(fleet: SharedFleet) -> None:
    """An assistant in a loop filling an agent's 64 slots left an admin nothing to look into it with."""
    hub = fleet.hub
    created = hub.cli("hub", "key", "create", "--name", "busy-member")
    assert created.returncode == 0, created.stderr
    member = created.stdout.strip()
    slow = {"agent": "alpha", "probe": "system.cpu.usage", "params": {"interval_s": 5}}
    member_status: list[int] = []

    async def post(key: str, body: dict[str, Any], into: list[int]) -> None:
        async with httpx.AsyncClient(base_url=hub.url, timeout=30) as http:
            answer = await http.post("/api/v1/probe", json=body, headers={"Authorization": f"Bearer {key}"})
            into.append(answer.status_code)

    async with trio.open_nursery() as nursery:
        for _ in range(60):
            nursery.start_soon(post, member, slow, member_status)
        with trio.fail_after(30):  # 56 in flight: the 4 past the members' share are answered at once
            while True:
                if member_status.count(503) == 4:
                    break
                await trio.sleep(0.05)
        busy_answer: list[int] = []
        await post(member, slow, busy_answer)
        admin_answer: list[int] = []
        await post(hub.admin_key, {"agent": "alpha", "probe": "system.memory.usage"}, admin_answer)
        assert busy_answer == [503]  # the member is told to come back
        assert admin_answer == [200]  # the admin still gets through
    assert sorted(member_status) == [200] * 56 + [503] * 4

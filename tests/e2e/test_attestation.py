"""Attestation end to end: a pack appearing without a version change holds the agent."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until, with_site
from tests.e2e.toolpack import write_toolpack


def status(hub: RunningHub, name: str) -> str:
    with hub.client() as http:
        return http.get(f"/api/v1/agents/{name}").json()["status"]


async def test_unexplained_change_is_held_until_an_admin_accepts(tmp_path: Path) -> None:
    site = write_toolpack(tmp_path / "site")
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "delta")
        agent.start()
        wait_until(lambda: status(hub, "delta") == "online")  # first connect: no false alarm
        async with mcp_client(hub.url, hub.admin_key) as client:
            assert (await call(client, "agent_overview", agent="delta"))["attestation"][
                "pending_change"
            ] is False
        agent.stop()
        wait_until(lambda: status(hub, "delta") == "offline")

        # same agent version, a new pack appears: unexplained
        agent.env = with_site(agent.env, site)
        agent.start()
        wait_until(lambda: status(hub, "delta") == "degraded")
        async with mcp_client(hub.url, hub.admin_key) as client:
            text = await call_error(client, "probe", agent="delta", probe="system.memory.usage")
            assert "held as degraded" in text
            assert "sonde hub agent accept delta" in text
            # connected but held: never "offline", in any tool that names why it cannot run
            text = await call_error(client, "diagnose", agent="delta", category="system")
            assert "held as degraded" in text
            assert "sonde hub agent accept delta" in text
            checked = await call(client, "health_check", agent="delta")
            assert [u["agent"] for u in checked["unreachable"]] == ["delta"]
            assert "held as degraded" in checked["unreachable"][0]["reason"]
            assert "offline" not in checked["unreachable"][0]["reason"]
            overview = await call(client, "agent_overview", agent="delta")
            assert overview["attestation"]["pending_change"] is True
            [change] = overview["attestation"]["pending_changes"]  # what an admin is asked to accept
            assert change.startswith("packs: {"), change
            assert "'toolcheck'" in change, change
            assert "toolcheck" not in overview["attestation"]["packs"]  # the old baseline is kept

            done = hub.cli("hub", "agent", "accept", "delta")
            assert done.returncode == 0, done.stderr
            # the accept was made on the file, not through this hub: every view says so at once
            assert (await call(client, "list_agents", name="delta"))["agents"][0]["status"] == "online"
            assert (await call(client, "agent_overview", agent="delta"))["status"] == "online"
            with hub.client() as http:
                listed = http.get("/api/v1/agents").json()["agents"]
            assert next(a["status"] for a in listed if a["name"] == "delta") == "online"
            reading = await call(client, "probe", agent="delta", probe="system.memory.usage")
            assert reading["result"]["total_bytes"] > 0
            assert (await call(client, "health_check", agent="delta"))["unreachable"] == []
            accepted = (await call(client, "agent_overview", agent="delta"))["attestation"]
            assert "toolcheck" in accepted["packs"]
            assert accepted["pending_changes"] == []
        with hub.client() as http:
            actions = [
                e["action"] for e in http.get("/api/v1/audit", params={"agent": "delta"}).json()["entries"]
            ]
            assert "attestation.held" in actions
            assert "attestation.accept" in actions
            again = http.post("/api/v1/agents/delta/attestation/accept").json()
            assert again["accepted"] is False
        agent.stop()

"""End to end, query_logs through the real mcp client, the session's real hub and agents.

A `since` that is no real time is refused as invalid arguments (not an internal
error); a filter a source cannot apply is refused, never dropped; the audit source
greps before its limit; and a source whose pack the agent lacks says so, naming
the sources the agent has, not a probe the caller never named.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import SharedFleet
from tests.e2e.mcpclient import call, call_error, mcp_client

pytestmark = pytest.mark.e2e

AGENT = "beta"
VAR_LOG_FILE = "/var/log/dpkg.log"  # refused before the agent opens it: it need not exist


async def test_a_since_that_is_no_real_time_is_invalid_arguments(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        for since in ("2026-13-45T99:99:99Z", "2026-11-25T::::::"):
            text = await call_error(client, "query_logs", source="audit", since=since)
            assert text.startswith("Invalid arguments for query_logs: since:"), text
            assert "a duration with s, m, h or d of at most 5 digits and 10000d" in text
            assert "or an ISO time 'YYYY-MM-DDTHH:MM[:SS]'" in text
        await call(client, "probe", agent=AGENT, probe="system.memory.usage")
        hour_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
        recent = await call(client, "query_logs", source="audit", agent=AGENT, since=hour_ago)
        assert recent["audit"]
        in_a_day = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 86400))
        assert (await call(client, "query_logs", source="audit", since=in_a_day))["audit"] == []


async def test_since_and_grep_are_refused_where_the_source_cannot_apply_them(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        old_lines = await call_error(
            client, "query_logs", source="system", agent=AGENT, path=VAR_LOG_FILE, since="1h"
        )
        assert "source='system' has no since filter; only sources systemd, audit support since" in old_lines
        for source, extra in (("docker", {"container": "web"}), ("nginx", {"kind": "access"})):
            for name, value in (("since", "1h"), ("grep", "error")):
                text = await call_error(
                    client, "query_logs", source=source, agent=AGENT, **extra, **{name: value}
                )
                assert f"source={source!r} has no {name} filter" in text, text


async def test_audit_grep_comes_before_the_lines_limit(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        for _ in range(3):
            await call(client, "probe", agent=AGENT, probe="system.info")
        for _ in range(6):  # newer entries that do not mention system.info
            await call(client, "probe", agent=AGENT, probe="system.memory.usage")
        newest = await call(client, "query_logs", source="audit", grep="system.info", lines=1)
        assert [entry["detail"].get("probe") for entry in newest["audit"]] == ["system.info"]
        assert newest["truncated"] is True
        by_target = await call(client, "query_logs", source="audit", grep=AGENT, lines=1000)
        assert any(entry["target"] == AGENT for entry in by_target["audit"])


async def test_a_source_the_agent_has_no_pack_for_names_its_sources(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with mcp_client(hub.url, hub.admin_key) as client:
        listed = await call(client, "list_agents", name=AGENT)
        packs = {label.split("@")[0] for label in listed["agents"][0]["packs"]}
        missing = [source for source in ("systemd", "docker", "nginx") if source not in packs]
        if not missing:
            pytest.skip(f"{AGENT} has the systemd, docker and nginx packs")
        text = await call_error(client, "query_logs", source=missing[0], agent=AGENT)
        assert f"Agent {AGENT} does not run the {missing[0]} pack (it is not installed there, or" in text
        assert f"`sonde packs list` on {AGENT} says why), so source={missing[0]!r} is not available" in text
        sources = [s for s in ("systemd", "docker", "nginx", "system") if s in packs]
        assert f"Sources available on {AGENT}: {', '.join([*sources, 'audit'])}." in text
        assert "probe" not in text

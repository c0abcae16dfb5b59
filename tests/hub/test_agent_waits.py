"""Which tool calls wait on agents (answered over SSE with keepalives when they ask for progress)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sonde.hub.tools import agent_waiting_calls, all_tools
from sonde.hub.tools.base import AgentWait
from sonde.packs.registry import load_packs

HUB: Any = SimpleNamespace(config=SimpleNamespace(probe_timeout_s=120.0), packs=load_packs())


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("probe", {"agent": "alpha", "probe": "system.network.traceroute"}, True),
        ("diagnose", {"agent": "alpha", "category": "system"}, True),
        ("health_check", {}, True),
        ("health_check", None, True),
        ("query_logs", {"source": "systemd", "agent": "alpha"}, True),
        # answered from the hub at once
        ("query_logs", {"source": "audit"}, False),
        ("query_logs", {"source": "audit", "agent": "alpha"}, False),
        ("query_logs", {"source": "systemd"}, False),  # no agent: refused at once
        ("list_agents", {}, False),
        ("list_capabilities", {}, False),
        ("agent_overview", {"agent": "alpha"}, False),
        ("no_such_tool", {}, False),
        # arguments the call refuses at once
        ("probe", {"agent": "alpha"}, False),
        ("probe", ["alpha"], False),
    ],
)
def test_which_calls_wait_on_agents(tool: str, arguments: Any, expected: bool) -> None:
    assert agent_waiting_calls(HUB, all_tools())(tool, arguments) is expected


def test_a_wait_names_what_it_waits_for_and_its_deadline() -> None:
    specs = {spec.name: spec for spec in all_tools()}
    probe = {"agent": "alpha", "probe": "system.network.traceroute"}
    # the probe's own timeout (60 s) where it is shorter than the hub's
    assert specs["probe"].agent_wait(HUB, probe) == AgentWait("alpha: system.network.traceroute", 60.0)
    diagnose = specs["diagnose"].agent_wait(HUB, {"agent": "alpha", "category": "system"})
    assert diagnose == AgentWait("alpha: the system runbook", 122.0)
    health = specs["health_check"].agent_wait(HUB, {"tags": ["#prod", "db"], "deadline_s": 60})
    assert health == AgentWait("the agents tagged #prod #db: health_check", 60.0)
    assert specs["health_check"].agent_wait(HUB, {}) == AgentWait("the fleet: health_check", 10.0)
    logs = specs["query_logs"].agent_wait(HUB, {"source": "docker", "agent": "beta", "container": "web"})
    assert logs == AgentWait("beta: its docker logs", 15.0)  # docker.container.logs' own

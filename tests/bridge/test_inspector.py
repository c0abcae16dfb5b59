"""The MCP Inspector's command-line mode, from the npm registry, on the real hub.

Once straight at ``/mcp`` over Streamable HTTP with the API key in a header,
once over stdio through `sonde mcp-bridge` (which finds the hub and key that
`sonde login` stored): ``tools/list`` and a ``tools/call`` of ``probe``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from tests.bridge.fleet import Fleet
from tests.bridge.nodetools import inspector_cli
from tests.subprocs import run_ok

pytestmark = [pytest.mark.e2e, pytest.mark.needs, pytest.mark.timeout(600)]

INSPECTOR_TIMEOUT_S = 120
PROBE_CALL = [
    "--method",
    "tools/call",
    "--tool-name",
    "probe",
    "--tool-arg",
    "agent=alpha",
    "--tool-arg",
    "probe=system.memory.usage",
]
TOOLS_LIST = ["--method", "tools/list"]


@pytest.fixture(scope="session")
def inspector() -> list[str]:
    return inspector_cli()


def run_inspector(inspector: list[str], fleet: Fleet, transport: str, method: list[str]) -> tuple[Any, str]:
    if transport == "http":
        target = [f"{fleet.hub.url}/mcp", "--transport", "http"]
        target += ["--header", f"Authorization: Bearer {fleet.hub.admin_key}", *method]
    else:
        home = fleet.client_env["HOME"]
        target = ["-e", f"HOME={home}", *method, "--", sys.executable, "-m", "sonde", "mcp-bridge"]
    done = run_ok([*inspector, *target], env=fleet.client_env, timeout=INSPECTOR_TIMEOUT_S)
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_tools_list(inspector: list[str], fleet: Fleet, transport: str) -> None:
    listed, stderr = run_inspector(inspector, fleet, transport, TOOLS_LIST)
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert {"probe", "list_agents", "health_check"} <= set(tools)
    assert tools["probe"]["inputSchema"]["required"] == ["agent", "probe"]
    assert tools["probe"]["annotations"]["readOnlyHint"] is True
    if transport == "stdio":
        assert "sonde mcp-bridge: ended session" in stderr


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_tools_call_probe(inspector: list[str], fleet: Fleet, transport: str) -> None:
    result, _stderr = run_inspector(inspector, fleet, transport, PROBE_CALL)
    assert result["isError"] is False
    reading = result["structuredContent"]
    assert reading["agent"] == "alpha"
    assert reading["probe"] == "system.memory.usage"
    assert reading["result"]["total_bytes"] > 0
    assert json.loads(result["content"][0]["text"]) == reading

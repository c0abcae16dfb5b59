"""Claude Code itself, from the npm registry, connected to Sonde the two ways README.md gives.

Once with the exact `claude mcp add --transport http ...` line that `sonde up` prints, and once
with README's `claude mcp add sonde -- sonde mcp-bridge` after `sonde login`. Each time
`claude -p` runs one turn whose model is scripted (`tests.bridge.scripted_model`): it calls
Sonde's tools as a model would, and Claude Code's own MCP client carries the calls to the real
hub and agent and their answers back. What Claude Code offered the model (Sonde's tools and
their schemas) and what each call returned are checked.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bridge.fleet import Fleet
from tests.bridge.nodetools import claude_code_cli
from tests.bridge.scripted_model import FINAL_TEXT, Model, scripted_model
from tests.e2e.procs import base_env, on_a_terminal

pytestmark = [pytest.mark.e2e, pytest.mark.needs, pytest.mark.timeout(600)]

CLAUDE_TIMEOUT_S = 120
CLAUDE_LINE = re.compile(
    r"claude mcp add --transport http sonde \S+ --header \"Authorization: Bearer sonde_\S+\""
)
SONDE_TOOLS = {
    "list_agents",
    "probe",
    "health_check",
    "diagnose",
    "query_logs",
    "agent_overview",
    "list_capabilities",
}


@pytest.fixture(scope="session")
def claude() -> Path:
    return claude_code_cli()


def claude_env(home: Path, model: Model) -> dict[str, str]:
    """Claude Code in its own HOME, asking the scripted model, with the venv's `sonde` on PATH
    and none of its traffic to anywhere else (updates, telemetry)."""
    env = base_env(home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["ANTHROPIC_BASE_URL"] = model.url
    env["ANTHROPIC_API_KEY"] = "sk-ant-scripted"
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    env["DISABLE_AUTOUPDATER"] = "1"
    # `claude -p` connects its MCP servers without waiting for them: a bridge slower to answer
    # `initialize` than the model's first request (a loaded machine) leaves Sonde's tools out of
    # the whole turn. README says so, and this, for scripts.
    env["MCP_CONNECTION_NONBLOCKING"] = "0"
    return env


def run_claude(claude: Path, argv: list[str], env: dict[str, str], project: Path) -> str:
    """``claude ARGV`` in ``project``; its stdout, after it exited 0."""
    done = subprocess.run(
        [str(claude), *argv],
        env=env,
        cwd=project,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLAUDE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"claude {argv[:2]} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def ask(claude: Path, env: dict[str, str], project: Path, question: str) -> str:
    """One turn of ``claude -p``, Sonde's tools allowed without asking."""
    return run_claude(claude, ["-p", question, "--allowedTools", "mcp__sonde"], env, project)


def assert_offered(model: Model) -> None:
    """Claude Code passed on every Sonde tool, with its description and schema."""
    assert set(model.offered) == SONDE_TOOLS, sorted(model.offered)
    probe = model.offered["probe"]
    assert probe["input_schema"]["required"] == ["agent", "probe"]
    assert probe["description"].startswith("Run ONE read-only probe on ONE agent")


def memory_reading(text: str, agent: str) -> dict[str, Any]:
    reading = json.loads(text)
    assert reading["agent"] == agent
    assert reading["probe"] == "system.memory.usage"
    assert reading["result"]["total_bytes"] > 0
    result: dict[str, Any] = reading["result"]
    return result


def test_the_line_sonde_up_prints_works_in_claude_code(claude: Path, tmp_path: Path) -> None:
    def plan(results: list[str]) -> tuple[str, dict[str, Any]] | None:
        if not results:
            return "list_agents", {}
        if len(results) == 1:
            (agent,) = json.loads(results[0])["agents"]
            return "probe", {"agent": agent["name"], "probe": "system.memory.usage"}
        return None

    project = tmp_path / "project"
    project.mkdir()
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--allow-root"]
    with on_a_terminal(args, base_env(tmp_path / "up-home"), CLAUDE_LINE) as seen:
        found = CLAUDE_LINE.search(seen)
        assert found is not None, seen
        printed = shlex.split(found.group(0))
        with scripted_model(plan) as model:
            env = claude_env(tmp_path / "home", model)
            added = run_claude(claude, printed[1:], env, project)
            assert "Added HTTP MCP server sonde" in added
            answer = ask(claude, env, project, "Is any of my servers short of memory?")
    assert FINAL_TEXT in answer
    assert_offered(model)
    assert model.errors == [False, False], model.results
    (agent,) = json.loads(model.results[0])["agents"]
    assert agent["status"] == "online"
    memory_reading(model.results[1], agent["name"])


def test_claude_code_through_the_bridge_after_sonde_login(claude: Path, fleet: Fleet, tmp_path: Path) -> None:
    plan_calls = [
        ("probe", {"agent": "alpha", "probe": "system.memory.usage"}),
        ("probe", {"agent": "no-such-agent", "probe": "system.memory.usage"}),
    ]

    def plan(results: list[str]) -> tuple[str, dict[str, Any]] | None:
        return plan_calls[len(results)] if len(results) < len(plan_calls) else None

    project = tmp_path / "project"
    project.mkdir()
    with scripted_model(plan) as model:
        # the client home where `sonde login` stored the hub's URL and key; README's line, as it is
        env = claude_env(Path(fleet.client_env["HOME"]), model)
        added = run_claude(claude, shlex.split("claude mcp add sonde -- sonde mcp-bridge")[1:], env, project)
        assert "Added stdio MCP server sonde" in added
        answer = ask(claude, env, project, "How much memory does alpha have free?")
    assert FINAL_TEXT in answer
    assert_offered(model)
    assert model.errors == [False, True], model.results
    memory_reading(model.results[0], "alpha")
    # the error as the model reads it: what was wrong, and what it can do instead
    assert model.results[1].startswith("Unknown agent 'no-such-agent'. Agents you can reach: alpha.")

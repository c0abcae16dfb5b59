"""`sonde up`: one command gives a hub, a local agent and a working connection line."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import base_env, spawn

CLAUDE_LINE = re.compile(
    r'claude mcp add --transport http sonde (http://127\.0\.0\.1:\d+)/mcp --header "Authorization: Bearer (sonde_\S+)"'
)


async def test_up_prints_a_working_line_and_keeps_its_identity(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home")
    seen: list[tuple[str, str]] = []
    for _ in range(2):
        proc = spawn(
            ["up", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--allow-root"], env
        )
        try:
            url, key = proc.wait_for(CLAUDE_LINE, timeout=30).groups()
            async with mcp_client(url, key) as client:
                agents = (await call(client, "list_agents"))["agents"]
                assert len(agents) == 1
                assert agents[0]["status"] == "online"
                reading = await call(client, "probe", agent=agents[0]["name"], probe="system.memory.usage")
                assert reading["result"]["total_bytes"] > 0
            seen.append((key, agents[0]["id"]))
        finally:
            assert proc.stop() == 0
    # the second run reuses the same key and the same agent identity
    assert seen[0] == seen[1]
    assert not (tmp_path / "home" / ".sonde").exists()

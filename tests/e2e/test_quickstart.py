"""`sonde up`: one command gives a hub, a local agent and a working connection line."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import base_env, spawn, with_site
from tests.e2e.toolpack import write_toolpack

CLAUDE_LINE = re.compile(
    r'claude mcp add --transport http sonde (http://127\.0\.0\.1:\d+)/mcp --header "Authorization: Bearer (sonde_\S+)"'
)


async def test_up_prints_a_working_line_and_keeps_its_identity(tmp_path: Path) -> None:
    env = base_env(tmp_path / "home")
    # the third run has a pack more, with no version change: an unexplained change that holds
    # a remote agent; the quick start's own agent, inside the hub, is accepted and answers
    with_pack = with_site(env, write_toolpack(tmp_path / "site"))
    seen: list[tuple[str, str]] = []
    for run_env in (env, env, with_pack):
        proc = spawn(
            ["up", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--allow-root"], run_env
        )
        try:
            url, key = proc.wait_for(CLAUDE_LINE, timeout=30).groups()
            assert f"    dashboard    : {url}/  (sign in with the API key)" in proc.lines
            async with mcp_client(url, key) as client:
                agents = (await call(client, "list_agents"))["agents"]
                assert len(agents) == 1
                assert agents[0]["status"] == "online"
                reading = await call(client, "probe", agent=agents[0]["name"], probe="system.memory.usage")
                assert reading["result"]["total_bytes"] > 0
            seen.append((key, agents[0]["id"]))
            if run_env is with_pack:
                assert any(
                    "accepted the changed attestation of the local agent" in line for line in proc.lines
                ), "\n".join(proc.lines)
                # and it is not told to an operator as held, with a command to accept it
                assert not any("is held as degraded" in line for line in proc.lines), "\n".join(proc.lines)
        finally:
            assert proc.stop() == 0
    # every run reuses the same key and the same agent identity
    assert seen[0] == seen[1] == seen[2]
    assert not (tmp_path / "home" / ".sonde").exists()
    # its key is on the audit chain, once: made by the first run, read back by the others
    with sqlite3.connect(tmp_path / "data" / "sonde.db") as db:
        made = db.execute("SELECT actor, action FROM audit WHERE action LIKE '%api_key.create'").fetchall()
    db.close()
    assert made == [("quickstart", "quickstart.api_key.create")]

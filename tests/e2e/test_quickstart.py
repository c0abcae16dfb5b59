"""`sonde up`: one command gives a hub, a local agent and a working connection line."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import (
    base_env,
    enroll_agent,
    on_a_terminal,
    running_hub,
    spawn,
    up_url_and_key,
    with_site,
)
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
            url, key = up_url_and_key(proc, tmp_path / "data")  # stderr a pipe: the key is not printed
            state = tmp_path / "data" / "quickstart.json"
            assert (
                f"    API key      : in {state} (printed only when stderr is a terminal and logs are text)"
                in proc.lines
            )
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


def test_on_a_terminal_up_prints_its_key(tmp_path: Path) -> None:
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--allow-root"]
    with on_a_terminal(args, base_env(tmp_path / "home"), CLAUDE_LINE) as seen:
        found = CLAUDE_LINE.search(seen)
        assert found is not None, seen
    key = json.loads((tmp_path / "data" / "quickstart.json").read_text())["apiKey"]
    assert found.group(2) == key
    assert f"    API key      : {key}" in seen.replace("\r\n", "\n")


def test_with_json_logs_up_keeps_its_key_off_the_terminal(tmp_path: Path) -> None:
    """As the README says: json logs go to a collector, which is no place for the key."""
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"), "--allow-root"]
    env = {**base_env(tmp_path / "home"), "SONDE_LOG_FORMAT": "json"}
    state = tmp_path / "data" / "quickstart.json"
    with on_a_terminal(args, env, re.compile(r'"message": "sonde up: ready".*\n')) as seen:
        # every line one JSON object: the ready banner too (it was 11 lines of text)
        records = [json.loads(line) for line in seen.replace("\r\n", "\n").splitlines() if line.strip()]
    (ready,) = [r for r in records if r["message"] == "sonde up: ready"]
    assert ready["keyFile"] == str(state)
    assert ready["connect"].endswith('--header "Authorization: Bearer <the API key>"')
    assert ready["mcpUrl"] == ready["url"] + "/mcp"
    key = json.loads(state.read_text())["apiKey"]
    assert key not in seen


def test_up_refuses_a_hub_it_did_not_make_and_changes_nothing(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        enroll_agent(hub, tmp_path, "web-1")
        assert hub.cli("hub", "key", "create", "--name", "gone").returncode == 0
        assert hub.cli("hub", "key", "revoke", "gone").returncode == 0
        keys_before = hub.cli("hub", "key", "list", "--json").stdout
    snapshot = sqlite3.connect(hub.data_dir / "sonde.db")
    before = snapshot.execute("SELECT COUNT(*) FROM audit").fetchone()
    snapshot.close()
    args = ["up", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir), "--allow-root"]
    proc = spawn(args, base_env(tmp_path / "home"))
    try:
        code = proc.popen.wait(30)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        proc.stop()
    assert code == 1, proc.output
    assert (
        f"sonde up: the data directory {hub.data_dir} holds a hub that `sonde up` did not make "
        "(1 agent, 2 API keys, 1 of them revoked); nothing was changed"
    ) in proc.output
    assert f"To run that hub, use `sonde hub --data-dir {hub.data_dir}`" in proc.output
    assert "`sonde up --data-dir OTHER`" in proc.output
    assert "Traceback" not in proc.output
    assert not (hub.data_dir / "quickstart.json").exists()
    assert hub.cli("hub", "key", "list", "--json").stdout == keys_before
    agents = json.loads(hub.cli("hub", "agent", "list", "--json").stdout)
    assert [a["name"] for a in agents] == ["web-1"], agents
    with sqlite3.connect(hub.data_dir / "sonde.db") as db:
        assert db.execute("SELECT COUNT(*) FROM audit").fetchone() == before
    db.close()

"""A real hub, two real agents, the real mcp client: the issue's main scenario."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.e2e.mcpclient import call, call_error, mcp_client
from tests.e2e.procs import SONDE, base_env, enroll_agent, running_hub, wait_until
from tests.subprocs import without_file_overrides


def agent_statuses(hub) -> dict[str, str]:  # type: ignore[no-untyped-def]
    with hub.client() as http:
        return {a["name"]: a["status"] for a in http.get("/api/v1/agents").json()["agents"]}


async def test_two_agents_probe_die_and_come_back(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agents = [enroll_agent(hub, tmp_path, name) for name in ("alpha", "beta")]
        for agent in agents:
            agent.start()
        wait_until(lambda: agent_statuses(hub) == {"alpha": "online", "beta": "online"})

        async with mcp_client(hub.url, hub.admin_key) as client:
            listed = await call(client, "list_agents")
            assert {a["name"] for a in listed["agents"]} == {"alpha", "beta"}
            assert listed["online"] == 2
            for name in ("alpha", "beta"):
                reading = await call(client, "probe", agent=name, probe="system.memory.usage")
                assert reading["agent"] == name
                assert reading["result"]["total_bytes"] > 0

            # kill beta hard: it must go offline, and a probe to it fails at once
            agents[1].stop(signal.SIGKILL)
            wait_until(lambda: agent_statuses(hub)["beta"] == "offline", timeout=10)
            started = time.monotonic()
            text = await call_error(client, "probe", agent="beta", probe="system.memory.usage")
            assert time.monotonic() - started < 2
            assert "offline since" in text

            # restart it: back online without re-enrolling
            agents[1].start()
            wait_until(lambda: agent_statuses(hub)["beta"] == "online")
            reading = await call(client, "probe", agent="beta", probe="system.memory.usage")
            assert reading["result"]["total_bytes"] > 0
        for agent in agents:
            assert agent.stop() == 0


def test_an_agent_pointed_at_another_hub_says_it_is_not_the_one_it_enrolled_with(tmp_path: Path) -> None:
    """The hub key pinned at enrollment refuses a hub reinstalled (or impersonated) at the same address."""
    with running_hub(tmp_path / "first") as first:
        agent = enroll_agent(first, tmp_path, "pinned")
    with running_hub(tmp_path / "second") as second:
        config = agent.home / ".sonde" / "config.json"
        saved = json.loads(config.read_text())
        config.write_text(json.dumps({**saved, "hubUrl": second.url}))  # the same address, a new hub
        proc = agent.start()
        try:
            proc.wait_for(re.compile(r"not signed with the hub key this agent pinned at enrollment"))
            proc.wait_for(re.compile(r"reconnecting to \S+ in [0-9.]+s \(attempt 1\)"))  # it keeps trying
            assert proc.popen.poll() is None
            assert "Traceback" not in proc.output
        finally:
            agent.stop()


def test_a_second_hub_on_a_taken_address_says_so_and_exits_1(tmp_path: Path) -> None:
    with running_hub(tmp_path / "first") as first:
        taken = first.url.removeprefix("http://")
        done, up = (
            subprocess.run(
                [*SONDE, *command, "--bind", taken, "--data-dir", str(tmp_path / data_dir)],
                env=base_env(tmp_path / "home"),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            for command, data_dir in ((["hub"], "second"), (["up", "--allow-root"], "third"))
        )
    for refused in (done, up):
        assert refused.returncode == 1
        assert f"cannot listen on {taken}: the address is already in use" in refused.stderr
        assert "--bind HOST:PORT" in refused.stderr
        assert "Traceback" not in refused.stderr
    # nothing made for a hub that never served: no database and signing key, no quick-start key
    assert not (tmp_path / "second").exists()
    assert not (tmp_path / "third").exists()


def test_an_agent_removed_or_replaced_is_told_why(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        gone, twin = (enroll_agent(hub, tmp_path, name) for name in ("gone", "twin"))
        procs = [gone.start(), twin.start()]
        try:
            wait_until(lambda: agent_statuses(hub) == {"gone": "online", "twin": "online"})
            # a second process on the same identity (a config cloned to another HOME or machine:
            # one HOME's `sonde start` is refused by its lock) replaces the first
            procs.append(twin.clone(tmp_path / "home-clone").start())
            procs[1].wait_for(re.compile(r"replaced by a newer connection of this agent \(if this repeats"))
            procs[1].wait_for(re.compile(r"WARNING .*is another `sonde start` running with this identity"))
            hub.proc.wait_for(re.compile(r"agent twin offline: replaced by a newer connection of this agent"))
            # each connection is on the record with where it came from, and whose place it took
            hub.proc.wait_for(re.compile(r"agent \S+ reconnected from 127\.0\.0\.1; closing its previous"))
            with hub.client() as http:
                rows = http.get("/api/v1/audit", params={"action": "agent.connect", "agent": "twin"}).json()
            connects = [
                (r["outcome"], r["detail"]["peer"], r["detail"].get("replaced")) for r in rows["entries"]
            ]
            assert connects[-1] == ("ok", "127.0.0.1", None)  # the first, oldest last
            assert ("ok", "127.0.0.1", "127.0.0.1") in connects[:-1]

            with hub.client() as http:
                assert http.delete("/api/v1/agents/gone").status_code == 200
            hub.proc.wait_for(re.compile(r"agent gone offline: removed by an admin"))
            procs[0].wait_for(re.compile(r"disconnected from \S+: .*removed by an admin"))
            wait_until(lambda: procs[0].popen.poll() is not None, timeout=15)  # refused at its reconnect
            assert procs[0].popen.returncode == 3, procs[0].output
            # one piece of advice, the agent's own (the hub cannot know how this agent was enrolled)
            procs[0].wait_for(
                re.compile(r"\(revoked: this agent was removed by an admin\); re-enroll with `sonde enroll")
            )
        finally:
            for proc in procs:
                proc.stop()


def test_an_agent_survives_sighup_and_its_stop_is_not_logged_as_an_abnormal_close(tmp_path: Path) -> None:
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        agent = enroll_agent(hub, tmp_path, "leaving")
        proc = agent.start()
        wait_until(lambda: agent_statuses(hub) == {"leaving": "online"})
        proc.popen.send_signal(signal.SIGHUP)  # a stray "reload": said, and survived
        proc.wait_for(re.compile(r"SIGHUP received: ignored"))
        assert proc.popen.poll() is None
        assert agent_statuses(hub) == {"leaving": "online"}
        assert agent.stop() == 0  # SIGTERM: a clean close from the agent's side
        hub.proc.wait_for(
            re.compile(r"agent leaving offline: the agent closed the connection, or it dropped")
        )
        assert "(1006)" not in hub.proc.output


def test_a_hub_that_cannot_write_its_database_says_so_and_does_not_start(tmp_path: Path) -> None:
    with running_hub(tmp_path) as first:
        data_dir = first.data_dir
    for path in data_dir.iterdir():
        path.chmod(0o444 if path.is_file() else 0o555)
    data_dir.chmod(0o555)
    try:
        done = subprocess.run(
            without_file_overrides([*SONDE, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)]),
            env=base_env(tmp_path / "home"),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        data_dir.chmod(0o700)
        for path in data_dir.iterdir():
            path.chmod(0o600 if path.is_file() else 0o700)
    assert done.returncode == 1, done.stderr
    assert f"cannot write the hub's database {data_dir / 'sonde.db'}" in done.stderr
    assert "listening" not in done.stderr
    assert "Traceback" not in done.stderr

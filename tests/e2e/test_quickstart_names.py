"""`sonde up`'s local agent never takes the name of an agent that is not its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sonde.agent.identity import default_agent_name
from tests.e2e.procs import SONDE, base_env, spawn, up_url_and_key, wait_until
from tests.ports import free_port
from tests.subprocs import run_ok


def agent_statuses(data_dir: Path, env: dict[str, str]) -> dict[str, str]:
    listed = run_ok([*SONDE, "hub", "agent", "list", "--json", "--data-dir", str(data_dir)], env=env)
    return {a["name"]: a["status"] for a in json.loads(listed.stdout)}


def test_up_leaves_a_real_agent_named_as_this_machine_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = base_env(tmp_path / "home")
    host = default_agent_name()
    args = ["up", "--bind", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir), "--allow-root"]
    up = spawn(args, env)
    try:
        url, _ = up_url_and_key(up, data_dir)
        # a real agent on this machine, enrolled under the hostname from its own HOME: it takes
        # the name over from the quick start's agent (a name-reserved token re-enrolls a name)
        token = run_ok(
            [*SONDE, "hub", "token", "create", "--name", host, "--data-dir", str(data_dir)], env=env
        )
        real_env = base_env(tmp_path / "real-home")
        (tmp_path / "real-home").mkdir()
        enroll = [*SONDE, "enroll", "--hub", url, "--token", token.stdout.strip(), "--name", host]
        run_ok(enroll, env=real_env, timeout=30)
        real = spawn(["start", "--allow-root"], real_env)
        wait_until(lambda: agent_statuses(data_dir, env).get(host) == "online", timeout=30)
    finally:
        assert up.stop() == 0
    up = spawn(args, env)  # the same address: the real agent comes back to it
    try:
        up_url_and_key(up, data_dir)
        wanted = {host: "online", f"{host}-local": "online"}
        try:
            wait_until(lambda: agent_statuses(data_dir, env) == wanted, timeout=40)
        except AssertionError:
            raise AssertionError(
                f"agents: {agent_statuses(data_dir, env)}; the real agent:\n{real.output}"
            ) from None
        assert real.popen.poll() is None, real.output
        up.wait_for(re.compile(rf"the local agent is enrolled as {re.escape(host)}-local: the name "))
        assert "revoked" not in real.output
    finally:
        assert up.stop() == 0
        real.stop()

"""Real processes for the bridge's end-to-end tests.

One `sonde hub` and one agent, ``alpha``, that also offers the test-only
``bridgetest`` pack; and a client home where `sonde login` stored the hub URL
and the admin key, so `sonde mcp-bridge` there needs no flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.bridge.slowpack import write_slow_pack
from tests.e2e.procs import SONDE, EnrolledAgent, RunningHub, base_env, enroll_agent, running_hub, wait_until
from tests.subprocs import run_ok


@dataclass
class Fleet:
    hub: RunningHub
    agent: EnrolledAgent
    client_env: dict[str, str]
    root: Path


def online(hub: RunningHub, name: str) -> bool:
    with hub.client() as http:
        agents = http.get("/api/v1/agents").json()["agents"]
    return any(a["name"] == name and a["status"] == "online" for a in agents)


@contextmanager
def running_fleet(root: Path) -> Iterator[Fleet]:
    """Start the hub and ``alpha`` under ``root``; `sonde login` in a client home; stop them after."""
    site = write_slow_pack(root / "site")
    with running_hub(root, "--probe-timeout", "120") as hub:
        agent = enroll_agent(hub, root, "alpha")
        agent.env["PYTHONPATH"] = str(site)
        agent.start()
        try:
            wait_until(lambda: online(hub, "alpha"), timeout=60)
            client_env = base_env(root / "client-home")
            (root / "client-home").mkdir()
            login = run_ok(
                [*SONDE, "login", "--hub", hub.url, "--api-key", hub.admin_key], env=client_env, timeout=30
            )
            assert "the hub accepted the key (1 agent visible to it)" in login.stderr
            yield Fleet(hub, agent, client_env, root)
        finally:
            agent.stop()

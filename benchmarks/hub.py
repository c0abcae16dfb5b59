"""A real `sonde hub` process for a scenario, and the REST calls the harness makes to it.

The hub runs as ``python -m sonde hub --bind 127.0.0.1:0`` in its own process
(so its CPU and RSS are its own), with the bench pack on its path as an
installed third-party pack. Its first start prints the admin key, which
`HubData` keeps for later starts on the same data directory.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import trio

from benchmarks.pack import write_entry_point
from benchmarks.procs import Child, ProcessMeter, child_env, open_child, python_module
from sonde.agent.identity import code_hash
from sonde.hub.core import FIRST_KEY_FILE

URL_LINE = re.compile(r"sonde hub listening on (\S+)")
HUB_START_TIMEOUT_S = 60.0
REST_TIMEOUT_S = 60.0


@dataclass
class Workspace:
    """The run's scratch directory: data dirs, homes, logs, and the bench pack's entry point."""

    root: Path
    keep: bool = False
    site_dir: Path = field(init=False)
    log_dir: Path = field(init=False)
    code_hash: str = field(init=False)  # what simulated agents attest for the whole run

    def __post_init__(self) -> None:
        self.code_hash = code_hash()
        self.site_dir = write_entry_point(self.root / "site")
        self.log_dir = self.root / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, keep: bool = False) -> Workspace:
        return cls(Path(tempfile.mkdtemp(prefix="sonde-bench-")), keep)

    def directory(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def env(self, home: str) -> dict[str, str]:
        """A child's environment: its own HOME under the workspace, the bench pack installed."""
        return child_env(self.root / "homes" / home, python_path=[self.site_dir])

    def remove(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class HubData:
    """One hub data directory and the admin key its first start printed."""

    data_dir: Path
    admin_key: str | None = None


@dataclass
class RunningHub:
    child: Child
    url: str
    admin_key: str
    data: HubData
    start_s: float

    def meter(self) -> ProcessMeter:
        return self.child.meter()

    def rest(self) -> httpx2.AsyncClient:
        """A REST client with the admin key (use it in ``async with``)."""
        return httpx2.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.admin_key}"},
            timeout=REST_TIMEOUT_S,
        )


@asynccontextmanager
async def running_hub(
    workspace: Workspace,
    data: HubData,
    *,
    name: str = "hub",
    heartbeat_interval_s: float = 30.0,
    probe_timeout_s: float = 30.0,
    python_options: Sequence[str] = (),
) -> AsyncIterator[RunningHub]:
    """Start a hub on ``data`` and yield it once it listens; it is stopped when the block ends.

    ``python_options`` go between the interpreter and ``-m sonde`` (``-m cProfile -o FILE``).
    """
    argv = python_module(
        "sonde",
        "hub",
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        str(data.data_dir),
        "--heartbeat-interval",
        f"{heartbeat_interval_s:g}",
        "--probe-timeout",
        f"{probe_timeout_s:g}",
    )
    argv[1:1] = python_options
    started = trio.current_time()
    async with open_child(name, argv, env=workspace.env(name), log_dir=workspace.log_dir) as child:
        url = (await child.wait_stderr(URL_LINE, HUB_START_TIMEOUT_S)).group(1)
        start_s = trio.current_time() - started
        if data.admin_key is None:  # stderr is a pipe: the hub wrote its first key to a file, not its log
            key_file = data.data_dir / FIRST_KEY_FILE
            if not key_file.exists():
                raise RuntimeError(f"the hub wrote no admin key at its first start:\n{child.describe()}")
            data.admin_key = key_file.read_text().strip()
        yield RunningHub(child, url, data.admin_key, data, start_s)


async def agent_statuses(hub: RunningHub, client: httpx2.AsyncClient) -> list[dict[str, Any]]:
    """``GET /api/v1/agents``: every agent the admin key sees."""
    response = await client.get("/api/v1/agents")
    response.raise_for_status()
    agents: list[dict[str, Any]] = response.json()["agents"]
    return agents


async def count_online(hub: RunningHub, count: int, timeout_s: float, poll_s: float) -> tuple[int, float]:
    """(agents online, seconds waited): until the hub lists ``count`` online, or ``timeout_s`` passed.

    Polls ``GET /api/v1/agents`` every ``poll_s`` (there is no event to wait on
    from outside the hub), so the answer is at most ``poll_s`` late.
    """
    started = trio.current_time()
    online = 0
    async with hub.rest() as client:
        with trio.move_on_after(timeout_s):
            while True:
                agents = await agent_statuses(hub, client)
                online = sum(1 for agent in agents if agent["status"] == "online")
                if online >= count:
                    break
                await trio.sleep(poll_s)
    return online, trio.current_time() - started


async def wait_online(hub: RunningHub, count: int, timeout_s: float, poll_s: float) -> float:
    """Seconds until the hub lists ``count`` agents online; `RuntimeError` after ``timeout_s``."""
    online, waited = await count_online(hub, count, timeout_s, poll_s)
    if online < count:
        raise RuntimeError(f"only {online} of {count} agents online after {timeout_s:g}s")
    return waited

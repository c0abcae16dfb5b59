"""How many connections Sonde holds on a database server while `health_check` runs there.

A real hub and a real agent (`sonde start`) whose pack config points at the machine's own
server as a login of the test's own, so the server side can tell Sonde's connections from
everyone else's. While one ``health_check`` of a category runs, another connection asks the
server every few ms how many of Sonde's connections it has (`PeakSampler`): the peak is what
an application next to Sonde would have found missing from the server's connection slots.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.e2e.harness import status_of
from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until

SAMPLE_INTERVAL_S = 0.003  # "every few ms": a probe's connection lives tens of ms
TURNS_PER_SERVER = 2  # what the README promises (sonde.packs.server_turns), not read from the code


@dataclass
class PeakSampler:
    """Calls ``count`` (the server's number of Sonde connections, over the sampler's own connection)
    every `SAMPLE_INTERVAL_S` in a thread until `stop`; keeps the highest and every reading."""

    count: Callable[[], int]
    readings: list[int] = field(default_factory=list)
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def peak(self) -> int:
        return max(self.readings, default=0)

    def run(self) -> None:
        while True:
            stopping = self._stopped.is_set()
            self.readings.append(self.count())
            if stopping:  # a last reading after the block
                return
            time.sleep(SAMPLE_INTERVAL_S)

    def stop(self) -> None:
        self._stopped.set()


@asynccontextmanager
async def sampling(count: Callable[[], int]) -> AsyncIterator[PeakSampler]:
    """A `PeakSampler` running for the block, and reading once more after it."""
    sampler = PeakSampler(count)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, sampler.run)
        try:
            yield sampler
        finally:
            sampler.stop()


def set_pack_config(home: Path, pack: str, settings: dict[str, Any]) -> None:
    config_file = home / ".sonde" / "config.json"
    config = json.loads(config_file.read_text())
    config["packs"] = {pack: settings}
    config_file.write_text(json.dumps(config))


@dataclass
class HealthChecks:
    """The answers of the runs and the sampler's peak over each."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


async def health_checks(
    tmp_path: Path,
    category: str,
    settings: dict[str, Any],
    count: Callable[[], int],
    runs: int = 3,
) -> HealthChecks:
    """``runs`` health_checks of ``category`` on a hub and an agent of their own (pack config
    ``settings``), one after the other, each sampled from the server side."""
    with running_hub(tmp_path, "--heartbeat-interval", "1") as hub:
        return await _health_checks(hub, tmp_path, category, settings, count, runs)


async def _health_checks(
    hub: RunningHub,
    tmp_path: Path,
    category: str,
    settings: dict[str, Any],
    count: Callable[[], int],
    runs: int,
) -> HealthChecks:
    agent = enroll_agent(hub, tmp_path, f"{category}-held")
    set_pack_config(agent.home, category, settings)
    agent.start()
    done = HealthChecks()
    try:
        wait_until(lambda: status_of(hub, agent.name) == "online", timeout=30)
        async with mcp_client(hub.url, hub.admin_key) as client:
            for _ in range(runs):
                async with sampling(count) as sampler:
                    started = time.perf_counter()
                    report = await call(
                        client, "health_check", agent=agent.name, categories=[category], deadline_s=60
                    )
                    done.seconds.append(time.perf_counter() - started)
                done.reports.append(report)
                done.peaks.append(sampler.peak)
    finally:
        agent.stop()
    return done


def check_held(done: HealthChecks, steps: int, connections_per_probe: int) -> None:
    """Every run answered all ``steps``, the sampler saw Sonde's connections at all, and never
    more of them than the turns allow."""
    for report in done.reports:
        assert report["failed"] == [], report["failed"]
        assert report["summary"]["probes_succeeded"] == steps
    print(f"peaks {done.peaks}, health_check seconds {[round(s, 3) for s in done.seconds]}")
    assert max(done.peaks) >= 1
    assert max(done.peaks) <= TURNS_PER_SERVER * connections_per_probe, done.peaks

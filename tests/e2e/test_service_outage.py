"""A database server that is down, or full, is the finding, not an `incomplete` category.

Before, every probe of a stopped server (or one turning clients away at its connection limit)
failed as "not available" and health_check read the category `incomplete` with no finding: the
outage read as a gap in the check. Here a real hub, a real agent and real redis-servers of the
test's own (the shared one on 6379 is left alone; it only makes the agent detect its pack).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sonde.packs.redis.runbook import RUNBOOK
from sonde.packs.runbook import Failure
from tests.conftest import require
from tests.e2e.harness import status_of
from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import EnrolledAgent, RunningHub, enroll_agent, running_hub, wait_until
from tests.ports import free_port

DOWN = "The redis server is down: it accepts no connection"
FULL = "The redis server refuses new connections: its connection limit is reached"


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server of this test's own with room for one client, that one client connected."""
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    port = free_port()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--maxclients", "1"]
    server = subprocess.Popen(
        [*argv, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        holder = redis.Redis(port=port, socket_timeout=5)
        deadline = time.monotonic() + 20
        while True:
            try:
                holder.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
        holder.close()
    finally:
        server.terminate()
        server.wait(10)


def redis_port(agent: EnrolledAgent, port: int) -> None:
    config_file = agent.home / ".sonde" / "config.json"
    config = json.loads(config_file.read_text())
    config["packs"] = {"redis": {"port": port}}
    config_file.write_text(json.dumps(config))


def redis_findings(report: dict[str, object]) -> tuple[str, list[tuple[str, str]]]:
    categories = {c["category"]: c["status"] for c in report["categories"]}  # type: ignore[attr-defined]
    findings = [(f["severity"], f["title"]) for f in report["findings"] if f["category"] == "redis"]  # type: ignore[attr-defined]
    return categories["redis"], findings


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[RunningHub]:
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    with running_hub(tmp_path, "--heartbeat-interval", "1") as running:
        yield running


async def check_redis(
    hub: RunningHub, tmp_path: Path, name: str, port: int
) -> tuple[str, list[tuple[str, str]]]:
    agent = enroll_agent(hub, tmp_path, name)
    redis_port(agent, port)
    agent.start()
    try:
        wait_until(lambda: status_of(hub, name) == "online", timeout=30)
        async with mcp_client(hub.url, hub.admin_key) as client:
            report = await call(client, "health_check", agent=name, categories=["redis"], deadline_s=20)
        return redis_findings(report)
    finally:
        agent.stop()


async def test_a_redis_nothing_listens_for_is_critical_and_down(hub: RunningHub, tmp_path: Path) -> None:
    status, findings = await check_redis(hub, tmp_path, "down", free_port())
    assert (status, findings) == ("critical", [("critical", DOWN)])


async def test_a_redis_at_its_client_limit_is_critical_and_full(
    hub: RunningHub, tmp_path: Path, full_redis: int
) -> None:
    status, findings = await check_redis(hub, tmp_path, "full", full_redis)
    assert (status, findings) == ("critical", [("critical", FULL)])


def test_an_outage_is_one_finding_and_other_failures_none() -> None:
    message = "Probe redis.server.info failed on web-1 (service_down): Redis is not accepting connections"
    down = {probe: Failure("service_down", message) for probe in RUNBOOK.probes}
    [finding] = RUNBOOK.evaluate({}, down)
    assert (finding.severity, finding.title) == ("critical", DOWN)
    assert finding.detail.startswith(message)
    other = {probe: Failure("unavailable", "the redis-py driver is missing") for probe in RUNBOOK.probes}
    assert RUNBOOK.evaluate({}, other) == []

"""A health_check of the redis pack takes at most 2 of the server's connections at once.

The runbook's four probes ran at once on the agent, each on a connection of its own. Here a
real hub, a real agent and a redis-server of the test's own (the shared one on 6379 is left
alone: it only makes the agent detect its pack), so that every client CLIENT LIST shows but
the sampler's own is Sonde's (Sonde names no Redis client).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sonde.packs.redis.runbook import RUNBOOK
from tests.conftest import require
from tests.e2e.connections_held import check_held, health_checks

START_TIMEOUT_S = 20
CONNECTIONS_PER_PROBE = 1  # the most one redis probe holds at once: `with_redis` calls follow each other


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server of this test's own on a free port; stopped afterwards."""
    require(shutil.which("redis-server") is not None, "redis-server is not installed")
    port = free_port()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--dir", str(tmp_path)]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_timeout=5)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        client.close()
        yield port
    finally:
        server.terminate()
        server.wait(10)


async def test_a_health_check_holds_at_most_two_connections(tmp_path: Path, own_redis: int) -> None:
    sampler = redis.Redis(port=own_redis, socket_timeout=5, single_connection_client=True)
    try:
        mine = sampler.client_id()

        def sonde_connections() -> int:
            return sum(client["id"] != str(mine) for client in sampler.client_list(_type="normal"))

        done = await health_checks(tmp_path, "redis", {"port": own_redis}, sonde_connections)
    finally:
        sampler.close()
    check_held(done, len(RUNBOOK.steps), CONNECTIONS_PER_PROBE)

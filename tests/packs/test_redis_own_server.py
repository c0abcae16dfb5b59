"""The redis pack against a redis-server of the test's own, for states the shared one must not
be put in: at maxmemory (noeviction, then an allkeys-lru cache), evicting, and a failed
background save. Each test starts Redis on 127.0.0.1 (a free port) with its dir under /tmp,
and stops it after.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import trio
from redis.backoff import NoBackoff
from redis.retry import Retry

from sonde.packs.context import ProbeContext
from sonde.packs.executor import execute_probe
from sonde.packs.redis import PACK
from sonde.packs.redis.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import human_bytes, shown_number
from tests.conftest import require
from tests.ports import free_port
from tests.subprocs import without_file_overrides

REGISTRY = PackRegistry.of([PACK])
START_TIMEOUT_S = 15
VALUE_BYTES = 16 * 1024
MAX_WRITES = 2_000  # at 16 KiB each, far past the 2 MiB of headroom the tests give


@dataclass
class OwnRedis:
    port: int
    directory: Path

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=5,
            decode_responses=True,
            retry=Retry(NoBackoff(), 0),
        )

    async def probe(self, name: str) -> dict[str, Any]:
        return (await execute_probe(REGISTRY, name, {"port": self.port}, ProbeContext())).result


def ready(process: subprocess.Popen[str]) -> bool:
    """Whether Redis came up: it logs to stdout, and says so."""
    assert process.stdout is not None
    return any("Ready to accept connections" in line for line in process.stdout)


@pytest.fixture
async def own_redis(open_dir: Path, request: pytest.FixtureRequest) -> AsyncIterator[OwnRedis]:
    """Redis on a free port, its dir ``open_dir/data``; as root, without the capabilities that
    override file modes, so a dir made read-only binds it. ``save`` comes from the test's
    ``save_points`` marker-free param (``request.param``), "" (no snapshots) by default."""
    require(
        shutil.which("redis-server") is not None,
        "redis-server is not installed (apt-get install redis-server)",
    )
    save = getattr(request, "param", "")
    data = open_dir / "data"
    data.mkdir(mode=0o755)
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data)]
    argv += ["--save", save, "--appendonly", "no", "--daemonize", "no", "--logfile", ""]
    process = subprocess.Popen(  # noqa: ASYNC220  # starts at once; Popen's wait is not used here
        without_file_overrides(argv), stdout=subprocess.PIPE, text=True, cwd=open_dir
    )
    try:
        with trio.fail_after(START_TIMEOUT_S):
            came_up = await trio.to_thread.run_sync(ready, process, abandon_on_cancel=True)
        assert came_up, f"redis-server on port {port} exited with {process.wait()}"
        yield OwnRedis(port, data)
    finally:
        process.kill()  # not SIGTERM: with save points Redis saves first, and may not (a test made its dir read-only)
        process.wait(timeout=START_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def fill_until_evicting(connection: redis.Redis) -> None:
    for _ in range(MAX_WRITES):
        connection.set(f"sonde:fill:{uuid.uuid4().hex}", "x" * VALUE_BYTES)
        if int(connection.info("stats")["evicted_keys"]) > 0:
            return
    pytest.fail(f"{MAX_WRITES} writes of {VALUE_BYTES} bytes evicted nothing")


def as_cache(connection: redis.Redis) -> None:
    """allkeys-lru with 2 MiB over what Redis uses now, filled until it evicts."""
    connection.config_set("maxmemory-policy", "allkeys-lru")
    connection.config_set("maxmemory", int(connection.info("memory")["used_memory"]) + 2 * 1024 * 1024)
    fill_until_evicting(connection)


def memory_findings(reading: dict[str, Any], runbook: Any = RUNBOOK) -> list[tuple[str, str]]:
    return [(f.severity, f.title) for f in runbook.evaluate({"redis.memory.details": reading})]


async def test_noeviction_at_the_limit_is_critical_and_a_full_cache_is_not(own_redis: OwnRedis) -> None:
    # An allkeys-lru cache at its limit got critical "uses 100.72% of maxmemory" and
    # "evicted 19026 keys since start": evicting is what a cache at its limit is for
    connection = own_redis.client()
    try:
        connection.config_set("maxmemory", int(connection.info("memory")["used_memory"]) // 2)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            connection.set("sonde:oom", "x")  # noeviction, the default: at the limit, writes fail
        full = await own_redis.probe("redis.memory.details")
        [finding] = RUNBOOK.evaluate({"redis.memory.details": full})
        assert (finding.severity, finding.title) == (
            "critical",
            f"Redis uses {shown_number(full['used_percent_of_max'])}% of maxmemory",
        )
        assert "policy noeviction: at the limit Redis refuses writes with an OOM error" in finding.detail
        assert "Raise maxmemory if the machine has room" in finding.detail
        await trio.to_thread.run_sync(as_cache, connection)
        cache = await own_redis.probe("redis.memory.details")
    finally:
        connection.close()
    assert cache["evicted_keys"] > 0
    assert cache["evicted_per_s"] < THRESHOLDS["evicted_per_s"].warning  # nothing wrote while it sampled
    assert memory_findings(cache) == [
        ("info", f"Redis cache is at maxmemory ({shown_number(cache['used_percent_of_max'])}%) and evicts")
    ]


async def test_eviction_rate_is_sampled_while_keys_are_evicted(own_redis: OwnRedis) -> None:
    connection = own_redis.client()
    stop = threading.Event()

    def keep_writing() -> None:
        while not stop.is_set():
            connection.set(f"sonde:churn:{uuid.uuid4().hex}", "x" * VALUE_BYTES)  # each evicts a key

    try:
        await trio.to_thread.run_sync(as_cache, connection)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, keep_writing)
            try:
                found = await own_redis.probe("redis.memory.details")
            finally:
                stop.set()
    finally:
        connection.close()
    assert found["evicted_per_s"] > 0
    assert found["sample_s"] > 0
    strict = build_runbook(
        {**THRESHOLDS, "evicted_per_s": replace(THRESHOLDS["evicted_per_s"], warning=0.5, critical=10**9)}
    )
    [finding] = strict.evaluate({"redis.memory.details": found})
    assert (finding.severity, finding.title) == (
        "warning",
        f"Redis evicts {shown_number(found['evicted_per_s'])} keys/s",
    )
    assert f"evicted over the last {shown_number(found['sample_s'])} s" in finding.detail
    assert "keyspace hit percent (redis.server.info)" in finding.detail


async def test_no_maxmemory_compares_rss_with_the_machines_ram(own_redis: OwnRedis) -> None:
    found = await own_redis.probe("redis.memory.details")
    ram = psutil.virtual_memory().total
    assert (found["maxmemory_bytes"], found["system_memory_bytes"]) == (0, ram)
    assert found["rss_percent_of_system"] == round(found["rss_bytes"] * 100 / ram, 2)
    assert memory_findings(found) == []  # a few MiB of a machine's RAM
    share = found["rss_percent_of_system"]
    strict = build_runbook(
        {
            **THRESHOLDS,
            "rss_percent_of_ram_no_limit": replace(
                THRESHOLDS["rss_percent_of_ram_no_limit"], warning=share / 2
            ),
        }
    )
    [finding] = strict.evaluate({"redis.memory.details": found})
    assert (finding.severity, finding.title) == (
        "warning",
        f"Redis holds {shown_number(share)}% of RAM with no maxmemory",
    )
    assert f"RSS {human_bytes(found['rss_bytes'])} of {human_bytes(ram)} RAM" in finding.detail


def wait_for_bgsave(connection: redis.Redis) -> dict[str, Any]:
    """INFO persistence once the background save started now is over."""
    assert connection.bgsave()
    while True:
        persistence: dict[str, Any] = connection.info("persistence")
        if not persistence["rdb_bgsave_in_progress"]:
            return persistence
        trio.from_thread.run(trio.sleep, 0.05)


@pytest.mark.parametrize("own_redis", ["3600 1"], indirect=True)
async def test_failed_background_save_is_critical(own_redis: OwnRedis) -> None:
    connection = own_redis.client()
    try:
        connection.set("sonde:saved", "1")
        with trio.fail_after(START_TIMEOUT_S):
            assert (await trio.to_thread.run_sync(wait_for_bgsave, connection))[
                "rdb_last_bgsave_status"
            ] == "ok"
        saved = await own_redis.probe("redis.persistence.status")
        assert RUNBOOK.evaluate({"redis.persistence.status": saved}) == []
        own_redis.directory.chmod(0o555)  # Redis may no longer write its dump there
        connection.set("sonde:unsaved", "1")
        with trio.fail_after(START_TIMEOUT_S):
            assert (await trio.to_thread.run_sync(wait_for_bgsave, connection))[
                "rdb_last_bgsave_status"
            ] == "err"
        with pytest.raises(redis.exceptions.ResponseError, match="MISCONF"):
            connection.set("sonde:refused", "1")
        failed = await own_redis.probe("redis.persistence.status")
    finally:
        connection.close()
    assert (failed["rdb_last_bgsave_status"], failed["rdb_changes_since_last_save"]) == ("err", 1)
    assert (failed["dir"], failed["save_points"], failed["stop_writes_on_bgsave_error"]) == (
        str(own_redis.directory),
        "3600 1",
        True,
    )
    [finding] = RUNBOOK.evaluate({"redis.persistence.status": failed})
    assert (finding.severity, finding.title) == ("critical", "Redis background save failed")
    assert "Redis refuses writes (MISCONF): stop-writes-on-bgsave-error is yes" in finding.detail
    assert (
        f"Check free space on the file system of dir {own_redis.directory} (file dump.rdb) (df) and that "
        "the user Redis runs as may write there;"
    ) in finding.detail


async def test_no_persistence_at_all_is_said(own_redis: OwnRedis) -> None:
    # save "" and appendonly no: every key is lost on a restart, and nothing said so
    found = await own_redis.probe("redis.persistence.status")
    assert (found["save_points"], found["aof_enabled"]) == ("", False)
    [finding] = RUNBOOK.evaluate({"redis.persistence.status": found})
    assert (finding.severity, finding.title) == (
        "info",
        "Redis does not persist its data: a restart loses it",
    )
    assert "fine for a cache" in finding.detail
    with_aof = {**found, "aof_enabled": True}
    assert RUNBOOK.evaluate({"redis.persistence.status": with_aof}) == []
    # settings this login may not read (CONFIG GET refused): nothing claimed
    unknown = {**found, "save_points": None}
    assert RUNBOOK.evaluate({"redis.persistence.status": unknown}) == []

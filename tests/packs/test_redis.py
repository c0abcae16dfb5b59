"""The redis pack against the real Redis on 127.0.0.1:6379, and its parsers on recorded INFO.

Tests that change the server (maxmemory, its policy, maxclients) restore the previous
values and delete their keys, whatever happens.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from redis.backoff import NoBackoff
from redis.retry import Retry

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.redis import PACK
from sonde.packs.redis.info import keyspace, parse_info, replicas
from sonde.packs.redis.memory import memory
from sonde.packs.redis.probes import keyspace_databases, replication, server_info, slow_entry
from sonde.packs.redis.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Failure, Threshold, human_seconds, shown_number
from tests.conftest import require

RECORDED = Path(__file__).parent / "recorded"
REGISTRY = PackRegistry.of([PACK])
START_HINT = (
    "Redis must run on 127.0.0.1:6379: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 "
    '--save "" --appendonly no'
)
TEST_DB = 9


def client(db: int = 0) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1",
        port=6379,
        db=db,
        socket_timeout=5,
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
    )


@pytest.fixture
def admin() -> Iterator[redis.Redis]:
    connection = client()
    try:
        connection.ping()
    except redis.exceptions.ConnectionError:
        connection.close()
        require(False, START_HINT)
    yield connection
    connection.close()


@pytest.fixture
def restored_config(admin: redis.Redis) -> Iterator[None]:
    saved = {key: admin.config_get(key)[key] for key in ("maxmemory", "maxmemory-policy", "maxclients")}
    try:
        yield
    finally:
        for key, value in saved.items():
            admin.config_set(key, value)


async def run(name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ProbeContext())).result


# parsers


def test_info_of_a_real_primary() -> None:
    info = parse_info((RECORDED / "redis-info-7.0-primary.txt").read_text())
    summary = server_info(info)
    assert (summary.version, summary.mode, summary.role, summary.maxclients) == (
        "7.0.15",
        "standalone",
        "master",
        10000,
    )
    assert summary.used_memory_bytes
    assert summary.used_memory_bytes > 0
    assert memory(info).used_percent_of_max is None  # maxmemory 0: no limit
    assert replication(info).replicas == []


def test_info_of_a_replica_whose_link_is_down() -> None:
    info = parse_info((RECORDED / "hand" / "redis-info-replica-link-down.txt").read_text())
    assert keyspace(info) == {
        0: {"keys": 120000, "expires": 119000, "avg_ttl": 3600000},
        3: {"keys": 5, "expires": 0, "avg_ttl": 0},
    }
    summary = server_info(info)
    assert (summary.total_keys, summary.rejected_connections, summary.keyspace_hit_percent) == (
        120005,
        42,
        90.0,
    )
    details = memory(info)
    assert (details.used_percent_of_max, details.maxmemory_policy, details.evicted_keys) == (
        87.89,
        "allkeys-lru",
        31337,
    )
    link = replication(info)
    assert (link.role, link.master_link_status, link.master_link_down_s, link.sync_in_progress) == (
        "slave",
        "down",
        97,
        False,
    )
    readings = {
        "redis.memory.details": details.model_dump(),
        "redis.server.info": summary.model_dump(),
        "redis.replication.status": link.model_dump(),
    }
    # an allkeys-lru cache below its limit, whatever it evicted since start: no memory finding
    assert [(f.severity, f.title) for f in RUNBOOK.evaluate(readings)] == [
        ("critical", "Redis replica has lost its primary"),
        ("warning", "Redis has rejected 42 connections since start"),
    ]


def test_replicas_of_a_primary() -> None:
    info = parse_info((RECORDED / "hand" / "redis-info-primary-two-replicas.txt").read_text())
    assert [r["state"] for r in replicas(info)] == ["online", "wait_bgsave"]
    status = replication(info)
    assert [(r.address, r.lag_bytes, r.lag_s) for r in status.replicas] == [
        ("10.0.0.11:6379", 100, 0),
        ("10.0.0.12:6380", 4100, 75),
    ]
    [finding] = RUNBOOK.evaluate({"redis.replication.status": status.model_dump()})
    assert (finding.severity, finding.title) == ("critical", "Redis replica 10.0.0.12:6380 lags 75 s")


def test_slowlog_entry_is_cut() -> None:
    entry = slow_entry([3, 1714990272, 12000, ["SET", "k", "v" * 500], "127.0.0.1:5000", ""], shown=True)
    assert (entry.time, entry.duration_us, len(entry.command), entry.client_name) == (
        "2024-05-06T10:11:12+00:00",
        12000,
        200,
        None,
    )


def test_slowlog_entry_from_bytes_reads_as_text() -> None:
    # the words come as bytes (never decoded: data may not be UTF-8)
    entry = slow_entry(
        [4, 1714990272, 42813, [b"eval", b"return 1", b"1", b"key\xff"], b"127.0.0.1:34022", b""], shown=True
    )
    assert (entry.command, entry.client, entry.client_name) == (
        "eval return 1 1 key\ufffd",
        "127.0.0.1:34022",
        None,
    )


def test_slowlog_entry_shows_no_values_unless_told() -> None:
    """HSET session:1 token Hunter2xyz went to the hub as it was sent."""
    raw = [5, 1714990272, 15000, [b"HSET", b"session:1", b"token", b"Hunter2xyz"], b"10.0.0.5:5000", b"app"]
    assert slow_entry(raw, shown=False).command == "HSET session:1 ? ?"
    enterprise = [6, 1714990272, 15000, 12, [b"GET", b"k"], b"10.0.0.5:5000", b"app"]  # a complexity first
    assert (slow_entry(enterprise, shown=False).command, slow_entry(enterprise, shown=False).client) == (
        "GET k",
        "10.0.0.5:5000",
    )


# the real Redis


async def test_server_info_and_keyspace(admin: redis.Redis) -> None:
    keys = client(TEST_DB)
    name = f"sonde:test:{uuid.uuid4().hex}"
    try:
        keys.set(name, "1", ex=60)
        info = await run("redis.server.info")
        assert info["version"]
        assert info["role"] == "master"
        assert info["connected_clients"] >= 2
        found = await run("redis.keyspace.summary")
        [db] = [d for d in found["databases"] if d["db"] == TEST_DB]
        assert db["keys"] >= 1
        assert db["expires"] >= 1
    finally:
        keys.delete(name)
        keys.close()


NO_TTL_DB = 11  # only this test's keys, none with a TTL


async def test_keys_without_a_ttl_have_no_average_ttl(admin: redis.Redis) -> None:
    # Redis says avg_ttl=0 when no key has a TTL: it read as avg_ttl_ms 0, "keys expire at once"
    keys = client(NO_TTL_DB)
    name = f"sonde:test:{uuid.uuid4().hex}"
    try:
        keys.set(name, "1")
        found = await run("redis.keyspace.summary")
        [db] = [d for d in found["databases"] if d["db"] == NO_TTL_DB]
        assert (db["keys"], db["expires"], db["avg_ttl_ms"]) == (1, 0, None)
    finally:
        keys.delete(name)
        keys.close()
    # keys with a TTL but no estimate yet (Redis samples them in its expire cycle): null too
    info = parse_info(
        "# Keyspace\ndb0:keys=5,expires=0,avg_ttl=0\ndb1:keys=4,expires=2,avg_ttl=0\n"
        "db2:keys=3,expires=1,avg_ttl=41000\n"
    )
    assert [(d.db, d.avg_ttl_ms) for d in keyspace_databases(info)] == [(0, None), (1, None), (2, 41000)]


async def test_slowlog(admin: redis.Redis) -> None:
    found = await run("redis.slowlog.entries", limit=5)
    assert found["length"] >= len(found["entries"])
    assert len(found["entries"]) <= 5


SLOW_SCRIPT_LOOPS = 3_000_000  # about 40 ms of Lua: over the default slowlog-log-slower-than of 10 ms


async def test_slowlog_reads_like_redis_cli(admin: redis.Redis) -> None:
    # The command came back as a Python bytes repr: 'b"eval local i=0 ... 0"'
    slower_than_us = int(admin.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"])
    require(0 <= slower_than_us <= 20_000, f"slowlog-log-slower-than is {slower_than_us} µs here")
    marker = f"hunt_fix_{uuid.uuid4().hex[:12]}"
    script = f"local i=0 while i<{SLOW_SCRIPT_LOOPS} do i=i+1 end return '{marker}'"
    slow = client()
    try:  # a key argument that is not UTF-8, as data may be (the script does not touch it)
        await trio.to_thread.run_sync(slow.execute_command, "EVAL", script, 1, b"hunt_fix_key_\xff")
    finally:
        slow.close()
    ctx = ProbeContext()
    ctx.settings.packs["redis"] = {"show_values": True}
    shown = (await execute_probe(REGISTRY, "redis.slowlog.entries", {"limit": 128}, ctx)).result
    [entry] = [e for e in shown["entries"] if marker in e["command"]]
    assert entry["command"] == f"EVAL {script} 1 hunt_fix_key_\ufffd"
    found = await run("redis.slowlog.entries", limit=128)
    [masked] = [e for e in found["entries"] if e["id"] == entry["id"]]
    # the script's code is shown, its values and the command's data are not
    assert masked["command"] == "EVAL local i=? while i<? do i=i+? end return ? ? ?"
    assert entry["client"].startswith("127.0.0.1:")
    assert entry["duration_us"] >= slower_than_us


async def test_connected_clients_leave_out_the_probe(admin: redis.Redis) -> None:
    # The probe's own connection was counted among the clients
    with trio.fail_after(15):
        while True:
            before = int(admin.info("clients")["connected_clients"])  # the admin's own included
            found = await run("redis.server.info")
            if int(admin.info("clients")["connected_clients"]) == before:  # no client came or went
                break
            await trio.sleep(0.1)
    assert found["connected_clients"] == before


async def test_memory_near_maxmemory_finding(admin: redis.Redis, restored_config: None) -> None:
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory", int(used * 1.15))  # used is now about 87 % of the limit
    found = await run("redis.memory.details")
    assert found["maxmemory_bytes"] == int(used * 1.15)
    assert 80 <= found["used_percent_of_max"] < 100  # give or take the buffers of the probe's own client
    [finding] = [f for f in RUNBOOK.evaluate({"redis.memory.details": found}) if "of maxmemory" in f.title]
    assert finding.severity == THRESHOLDS["memory_percent_of_max"].severity(found["used_percent_of_max"])
    assert finding.title == f"Redis uses {shown_number(found['used_percent_of_max'])}% of maxmemory"


async def test_volatile_policy_without_ttl_keys_refuses_writes(
    admin: redis.Redis, restored_config: None
) -> None:
    # under volatile-lru at the limit, any key with a TTL on this server could be evicted: only run
    # where there is none, which is also the case the wording is about
    require(
        all(db.get("expires", 0) == 0 for db in admin.info("keyspace").values()),
        "keys with a TTL on this Redis: volatile-lru at the limit would evict them",
    )
    keys = client(TEST_DB)
    name = f"sonde:oom:{uuid.uuid4().hex}"
    try:
        admin.config_set("maxmemory-policy", "volatile-lru")
        admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) // 2)
        with pytest.raises(redis.exceptions.OutOfMemoryError, match="used memory > 'maxmemory'"):
            await trio.to_thread.run_sync(keys.set, name, "x")  # no key has a TTL: nothing to evict
        full = await run("redis.memory.details")
        [finding] = [f for f in RUNBOOK.evaluate({"redis.memory.details": full}) if "of maxmemory" in f.title]
        assert finding.severity == "critical"
        assert (
            "policy volatile-lru: at the limit Redis evicts only keys that have a TTL; when no key has "
            "one, writes fail with an OOM error just as under noeviction." in finding.detail
        )
        admin.config_set("maxmemory", 0)  # no limit: the same policy never evicts, nor refuses
        await trio.to_thread.run_sync(keys.set, name, "x")
        unlimited = await run("redis.memory.details")
    finally:
        keys.delete(name)
        keys.close()
    assert (unlimited["maxmemory_bytes"], unlimited["used_percent_of_max"]) == (0, None)
    assert not [f for f in RUNBOOK.evaluate({"redis.memory.details": unlimited}) if "of maxmemory" in f.title]


def ping_refusal(connection: redis.Redis) -> str | None:
    """Why the server refused ``connection``'s ping, or None when it answered."""
    try:
        connection.ping()
    except redis.exceptions.ConnectionError as refused:
        return str(refused)
    return None


WINDOW_TRIES = 5  # counts around a step of a test's own, until no other client came or went


async def test_rejected_connection_finding(admin: redis.Redis, restored_config: None) -> None:
    rejected_before = int(admin.info("stats")["rejected_connections"])
    limit = admin.config_get("maxclients")["maxclients"]
    # Another client of this server (an end-to-end test's agent) may leave between the count and
    # the extra connection, which then fits: such a window is tried again, a few times at most.
    for _ in range(WINDOW_TRIES):
        connected = int(admin.info("clients")["connected_clients"])
        admin.config_set("maxclients", connected)  # the next client is one too many
        extra = client()
        try:
            refused = await trio.to_thread.run_sync(ping_refusal, extra)
        finally:
            extra.close()
            admin.config_set("maxclients", limit)  # before the probe, which needs a connection too
        if refused is not None:
            break
    else:
        pytest.fail("a client left in every window: the extra connection was never refused")
    assert "max number of clients" in refused
    found = await run("redis.server.info")
    assert found["rejected_connections"] > rejected_before
    strict = build_runbook(
        {**THRESHOLDS, "rejected_connections": Threshold(warning=rejected_before + 1, critical=10**9)}
    )
    [finding] = strict.evaluate({"redis.server.info": found})
    assert finding.title == f"Redis has rejected {found['rejected_connections']} connections since start"
    assert f"since the server started {human_seconds(found['uptime_s'])} ago" in finding.detail
    assert f"Now: maxclients {limit}, {found['connected_clients']} clients connected" in finding.detail
    assert "was reached;" not in finding.detail  # the limit was hit then, not necessarily now


async def test_replication_of_a_lone_primary(admin: redis.Redis) -> None:
    found = await run("redis.replication.status")
    assert (found["role"], found["replicas"], found["master_link_status"]) == ("master", [], None)
    assert RUNBOOK.evaluate({"redis.replication.status": found}) == []


async def test_a_redis_nothing_listens_for_is_down() -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run("redis.server.info", port=1)
    assert caught.value.code == "service_down"
    assert "Redis is not accepting connections at 127.0.0.1:1" in caught.value.message


async def test_the_down_finding_reads_as_sentences() -> None:
    # redis-py's message ends in a full stop: the finding read "Connection refused.. Check whether"
    with pytest.raises(ProbeExecutionError) as caught:
        await run("redis.server.info", port=1)
    message = caught.value.message
    assert message.endswith(".")
    [finding] = RUNBOOK.evaluate({}, {"redis.server.info": Failure("service_down", message)})
    assert ".." not in finding.detail
    assert f"{message} Check whether its service runs" in finding.detail
    [finding] = RUNBOOK.evaluate({}, {"redis.server.info": Failure("service_down", message.rstrip("."))})
    assert f"{message} Check whether its service runs" in finding.detail  # a message without one gets one


IPV6_HINT = "Redis must also listen on [::1]:6379 (Debian's redis.conf binds 127.0.0.1 -::1)"


@pytest.fixture
def ipv6_loopback_redis() -> None:
    connection = redis.Redis(host="::1", port=6379, socket_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        connection.ping()
    except redis.exceptions.ConnectionError:
        require(False, IPV6_HINT)
    finally:
        connection.close()


@pytest.mark.parametrize("host", ["::1", "[::1]"])
async def test_server_info_over_the_ipv6_loopback(ipv6_loopback_redis: None, host: str) -> None:
    info = await run("redis.server.info", host=host)
    assert info["version"]
    assert info["role"] == "master"


async def test_unreachable_ipv6_redis_is_named_with_brackets() -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run("redis.server.info", host="::1", port=1)
    assert caught.value.code == "service_down"
    assert "Redis is not accepting connections at [::1]:1" in caught.value.message

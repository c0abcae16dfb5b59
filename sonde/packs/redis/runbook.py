"""The `redis` category: memory by maxmemory policy, eviction rate, persistence, clients, replication.

Memory is judged by what Redis does at its limit: a cache (allkeys-*, or volatile-*
with keys that have a TTL) at maxmemory evicts, which is normal (info) unless the
eviction rate is high; where nothing can be evicted (noeviction, volatile-* without TTL
keys) the limit means failed writes. With no limit (maxmemory 0), Redis' RSS is compared
with the machine's RAM. Evictions are judged by the rate the probe sampled, never by the
since-start counter. Sizes and ages read as a person reads them (`human_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.redis import PACK
from sonde.packs.runbook import (
    Finding,
    Reading,
    Runbook,
    RunbookStep,
    Threshold,
    check,
    human_bytes,
    human_seconds,
    shown_number,
)

THRESHOLDS: dict[str, Threshold] = {
    "memory_percent_of_max": Threshold(warning=80, critical=95, unit="%"),  # where nothing can be evicted
    "evicted_per_s": Threshold(warning=1_000, critical=10_000, unit=" keys/s"),
    "rss_percent_of_ram_no_limit": Threshold(warning=50, critical=90, unit="%"),
    "rejected_connections": Threshold(warning=1, critical=100),
    "replica_lag_s": Threshold(warning=10, critical=60, unit=" s"),
}
CACHE_FULL_PERCENT = 95  # of maxmemory: a cache at or above it is full, and evicts
MEMORY = "redis.memory.details"
WHAT_FILLS_IT = "what fills it (redis.keyspace.summary; redis-cli --bigkeys)"


def since_start(reading: Reading) -> str:
    """How long a Redis counter has been counting, with the uptime when the reading has it."""
    uptime = reading.get("uptime_s")
    started = "since the server started" + (f" {human_seconds(uptime)} ago" if uptime is not None else "")
    return f"{started} (or since its last CONFIG RESETSTAT)"


def at_the_limit(policy: str | None) -> str:
    """What Redis does at maxmemory under ``policy``, in words: a volatile-* policy evicts only keys with a TTL."""
    if policy == "noeviction":
        return "refuses writes with an OOM error"
    if policy is not None and policy.startswith("volatile-"):
        return (
            "evicts only keys that have a TTL; when no key has one, writes fail with an OOM error "
            "just as under noeviction"
        )
    if policy is not None and policy.startswith("allkeys-"):
        return "evicts keys, any key, with or without a TTL"
    return "evicts keys or refuses writes, as its policy says"


def evicts(reading: Reading) -> bool:
    """Whether Redis can make room at its limit: any key under allkeys-*, keys with a TTL under volatile-*."""
    policy = reading.get("maxmemory_policy") or ""
    return policy.startswith("allkeys-") or (
        policy.startswith("volatile-") and (reading.get("keys_with_ttl") or 0) > 0
    )


def usage(reading: Reading) -> str:
    used, limit = reading.get("used_bytes"), reading.get("maxmemory_bytes")
    return f"{human_bytes(used)} used of maxmemory {human_bytes(limit)}, policy {reading.get('maxmemory_policy')}"


def eviction_rate(reading: Reading) -> str:
    rate, evicted = reading.get("evicted_per_s"), reading.get("evicted_keys")
    now = (
        f"{shown_number(rate)} keys/s evicted over the last {shown_number(reading.get('sample_s') or 0)} s"
        if rate is not None
        else "eviction rate not sampled"
    )
    return (
        f"{now} ({reading.get('evicted_per_s_since_start')} keys/s on average over "
        f"{human_seconds(reading.get('uptime_s'))} of uptime, {evicted} in all)"
    )


def cache_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """A cache at its limit evicts, which is what it is for: info, unless the rate is high."""
    rate, percent = reading.get("evicted_per_s"), reading.get("used_percent_of_max")
    found = check(
        thresholds["evicted_per_s"],
        rate,
        MEMORY,
        "Redis evicts {value}",
        f"{eviction_rate(reading)}; {usage(reading)}. Keys may be dropped before they are read again: "
        f"compare the keyspace hit percent (redis.server.info), and raise maxmemory or find {WHAT_FILLS_IT}.",
    )
    if found or ((percent or 0) < CACHE_FULL_PERCENT and not rate):
        return found
    detail = (
        f"{usage(reading)}: at the limit Redis {at_the_limit(reading.get('maxmemory_policy'))}; "
        f"{eviction_rate(reading)}. Normal for a cache; a problem only if the keyspace hit percent "
        "(redis.server.info) falls."
    )
    return [
        Finding(
            "info", f"Redis cache is at maxmemory ({shown_number(percent or 0)}%) and evicts", detail, MEMORY
        )
    ]


def no_limit_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    return check(
        thresholds["rss_percent_of_ram_no_limit"],
        reading.get("rss_percent_of_system"),
        MEMORY,
        "Redis holds {value} of RAM with no maxmemory",
        f"RSS {human_bytes(reading.get('rss_bytes'))} of {human_bytes(reading.get('system_memory_bytes'))} "
        "RAM on its machine, maxmemory 0: Redis grows until the machine runs out and the kernel's OOM "
        "killer ends it (or another process), and a background save or AOF rewrite forks a child that "
        f"may need up to as much again. Find {WHAT_FILLS_IT}, and set maxmemory below the RAM Redis may "
        "have, with a policy (allkeys-lru for a cache, noeviction for data that must stay).",
    )


def memory_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    if not reading.get("maxmemory_bytes"):
        return no_limit_findings(thresholds, reading)
    if evicts(reading):
        return cache_findings(thresholds, reading)
    return check(
        thresholds["memory_percent_of_max"],
        reading.get("used_percent_of_max"),
        MEMORY,
        "Redis uses {value} of maxmemory",
        f"{usage(reading)}: at the limit Redis {at_the_limit(reading.get('maxmemory_policy'))}. Raise "
        f"maxmemory if the machine has room, choose an eviction policy if Redis is a cache, or find "
        f"{WHAT_FILLS_IT}.",
    )


def writes_after_failed_save(reading: Reading) -> str:
    """Whether a failed BGSAVE stops writes: only with stop-writes-on-bgsave-error yes and save points set."""
    stop, points = reading.get("stop_writes_on_bgsave_error"), reading.get("save_points")
    if stop and points:
        return f"Redis refuses writes (MISCONF): stop-writes-on-bgsave-error is yes, save points '{points}'"
    if stop is False:
        return "Writes go on (stop-writes-on-bgsave-error no), but are not on disk"
    if points == "":
        return "Writes go on (no save points are set), but are not on disk"
    return (
        "If stop-writes-on-bgsave-error is yes (the default) and save points are set, Redis refuses "
        "writes (MISCONF); the agent may not read them (CONFIG GET)"
    )


def where_it_writes(reading: Reading, file_key: str) -> str:
    folder = reading.get("dir")
    if folder is None:
        return "its dir (redis-cli CONFIG GET dir)"
    return f"dir {folder} (file {reading.get(file_key)})"


def what_to_check(where: str) -> str:
    return (
        f"Check free space on the file system of {where} (df) and that the user Redis runs as may "
        "write there; the Redis log says why it failed (a failed fork: low memory, vm.overcommit_memory)."
    )


def no_persistence_findings(reading: Reading, probe: str) -> list[Finding]:
    """Info when Redis writes nothing to disk: no save points and no AOF (unknown settings: nothing said)."""
    if reading.get("save_points") != "" or reading.get("aof_enabled") is not False:
        return []
    detail = (
        "No save points are set (save '') and the AOF is off (appendonly no): Redis keeps its data in "
        "memory only, and every key is gone after a restart or a crash. That is fine for a cache its "
        "clients can fill again; for data that must stay, set save points or turn on the AOF "
        "(appendonly yes) in redis.conf."
    )
    return [Finding("info", "Redis does not persist its data: a restart loses it", detail, probe)]


def persistence_findings(reading: Reading) -> list[Finding]:
    probe = "redis.persistence.status"
    found = no_persistence_findings(reading, probe)
    if reading.get("rdb_last_bgsave_status") == "err":
        detail = (
            f"rdb_last_bgsave_status err: {reading.get('rdb_changes_since_last_save')} changes not saved "
            f"since {reading.get('rdb_last_save_time')} ({human_seconds(reading.get('rdb_last_save_age_s'))} "
            f"ago). {writes_after_failed_save(reading)}. {what_to_check(where_it_writes(reading, 'dbfilename'))} "
            "Then run BGSAVE and read this probe again."
        )
        found.append(Finding("critical", "Redis background save failed", detail, probe))
    aof_where = what_to_check(where_it_writes(reading, "appendfilename"))
    if reading.get("aof_enabled") and reading.get("aof_last_write_status") == "err":
        detail = f"aof_last_write_status err: Redis refuses writes (MISCONF) until it can append to its AOF. {aof_where}"
        found.append(Finding("critical", "Redis cannot write its AOF", detail, probe))
    if reading.get("aof_last_bgrewrite_status") == "err":
        detail = (
            f"aof_last_bgrewrite_status err ({reading.get('aof_rewrite_failures_in_a_row')} failures in a "
            f"row): writes go on, but the AOF grows and a restart replays it all. {aof_where}"
        )
        found.append(Finding("warning", "Redis AOF rewrite failed", detail, probe))
    return found


def client_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    return check(
        thresholds["rejected_connections"],
        reading.get("rejected_connections"),
        "redis.server.info",
        "Redis has rejected {value} connections since start",
        f"Counted {since_start(reading)}: clients refused because maxclients was reached at the time. "
        f"Now: maxclients {reading.get('maxclients')}, {reading.get('connected_clients')} clients connected.",
    )


def replication_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "redis.replication.status"
    found: list[Finding] = []
    if reading.get("master_link_status") == "down":
        found.append(
            Finding(
                "critical",
                "Redis replica has lost its primary",
                f"Link to {reading.get('master_host')}:{reading.get('master_port')} is down "
                f"(for {human_seconds(reading.get('master_link_down_s'))}); this replica serves stale data.",
                probe,
            )
        )
    for replica in reading.get("replicas", []):
        found += check(
            thresholds["replica_lag_s"],
            replica.get("lag_s"),
            probe,
            f"Redis replica {replica['address']} lags {{value}}",
            f"state {replica.get('state')}.",
        )
    return found


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="redis",
        description=(
            "Redis memory by maxmemory policy (or against RAM with no limit), eviction rate, failed "
            "saves and AOF writes, no persistence at all, rejected connections and replication."
        ),
        steps=(
            RunbookStep(MEMORY, partial(memory_findings, thresholds)),
            RunbookStep("redis.persistence.status", persistence_findings),
            RunbookStep("redis.server.info", partial(client_findings, thresholds)),
            RunbookStep("redis.replication.status", partial(replication_findings, thresholds)),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

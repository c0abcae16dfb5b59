"""The `redis.memory.details` probe: memory against maxmemory and the machine's RAM, and evictions.

Evictions are judged as a rate, not as the since-start counter (which only a restart
resets): the probe reads INFO twice, `EVICTION_SAMPLE_S` apart, and divides the keys
evicted between the two by the time between them on the server's clock.
"""

from __future__ import annotations

from collections.abc import Mapping

import psutil
import trio

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.redis import PACK
from sonde.packs.redis.connection import RedisParams, one_turn, redis_endpoint
from sonde.packs.redis.info import integer, keyspace, number
from sonde.packs.redis.probes import read_info

EVICTION_SAMPLE_S = 1.0  # between the two INFO readings the eviction rate is taken over
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class Memory(Result):
    used_bytes: int | None
    rss_bytes: int | None
    peak_bytes: int | None
    dataset_bytes: int | None
    fragmentation_ratio: float | None
    maxmemory_bytes: int | None
    maxmemory_policy: str | None
    used_percent_of_max: float | None
    system_memory_bytes: int | None
    rss_percent_of_system: float | None
    keys_with_ttl: int
    evicted_keys: int | None
    evicted_per_s: float | None
    sample_s: float | None
    evicted_per_s_since_start: float | None
    uptime_s: int | None
    allocator: str | None


def percent(part: int | None, whole: int | None) -> float | None:
    return round(part * 100 / whole, 2) if part is not None and whole else None


def memory(
    info: Mapping[str, str],
    evicted_per_s: float | None = None,
    sample_s: float | None = None,
    system_memory: int | None = None,
) -> Memory:
    """The memory summary of INFO; ``system_memory`` stands in when INFO has no total_system_memory."""
    used, rss, limit = (
        integer(info, "used_memory"),
        integer(info, "used_memory_rss"),
        integer(info, "maxmemory"),
    )
    evicted, uptime = integer(info, "evicted_keys"), integer(info, "uptime_in_seconds")
    system = integer(info, "total_system_memory") or system_memory
    return Memory(
        used_bytes=used,
        rss_bytes=rss,
        peak_bytes=integer(info, "used_memory_peak"),
        dataset_bytes=integer(info, "used_memory_dataset"),
        fragmentation_ratio=number(info, "mem_fragmentation_ratio"),
        maxmemory_bytes=limit,
        maxmemory_policy=info.get("maxmemory_policy"),
        used_percent_of_max=percent(used, limit),
        system_memory_bytes=system,
        rss_percent_of_system=percent(rss, system),
        keys_with_ttl=sum(db.get("expires", 0) for db in keyspace(info).values()),
        evicted_keys=evicted,
        evicted_per_s=evicted_per_s,
        sample_s=sample_s,
        evicted_per_s_since_start=round(evicted / uptime, 1) if evicted is not None and uptime else None,
        uptime_s=uptime,
        allocator=info.get("mem_allocator"),
    )


def eviction_rate(
    before: Mapping[str, str], after: Mapping[str, str], elapsed_s: float
) -> tuple[float, float] | None:
    """Keys evicted per second between two INFO readings, and the seconds between them:
    the server's own clock (server_time_usec) when both have it, else ``elapsed_s``."""
    first, second = integer(before, "evicted_keys"), integer(after, "evicted_keys")
    start_us, end_us = integer(before, "server_time_usec"), integer(after, "server_time_usec")
    if start_us is not None and end_us is not None:
        elapsed_s = (end_us - start_us) / 1_000_000
    if first is None or second is None or elapsed_s <= 0 or second < first:  # < : CONFIG RESETSTAT
        return None
    return round((second - first) / elapsed_s, 1), round(elapsed_s, 3)


def on_this_machine(ctx: ProbeContext, params: RedisParams) -> bool:
    host = redis_endpoint(ctx, params).host
    return host.startswith("/") or host in LOOPBACK_HOSTS


@PACK.probe(
    "redis.memory.details",
    """Redis memory: used, RSS, peak and dataset bytes, fragmentation ratio, maxmemory and
    its policy, percent of maxmemory used (null when there is no limit), the RAM of the
    machine Redis runs on (Redis' total_system_memory; this machine's when Redis does not
    say and runs here) and RSS as a percent of it, and keys with a TTL. Evictions: keys
    evicted since start, the average per second since start, and the current rate: keys
    evicted per second between two readings about 1 s apart (evicted_per_s, over sample_s).
    At maxmemory Redis evicts keys (a volatile-* policy only keys with a TTL) or fails writes
    with OOM: under noeviction, and under volatile-* when no key has a TTL.""",
    timeout_s=15,
)
@one_turn
async def redis_memory(ctx: ProbeContext, params: RedisParams) -> Memory:
    before, started = await read_info(ctx, params), trio.current_time()
    await trio.sleep(EVICTION_SAMPLE_S)
    after = await read_info(ctx, params)
    rate, sample_s = eviction_rate(before, after, trio.current_time() - started) or (None, None)
    here = psutil.virtual_memory().total if on_this_machine(ctx, params) else None
    return memory(after, rate, sample_s, system_memory=here)

"""Redis probes: server info, keyspace, slow log and replication (memory: `memory`, persistence: `persistence`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.query_values import masked_command, values_shown
from sonde.packs.redis import PACK
from sonde.packs.redis.connection import RedisParams, info_text, one_turn, with_redis
from sonde.packs.redis.info import hit_percent, integer, keyspace, parse_info, replicas
from sonde.packs.system.info import iso_utc

COMMAND_MAX_CHARS = 200
OWN_CONNECTIONS = 1  # the probe's connection, counted in the connected_clients it reads


async def read_info(ctx: ProbeContext, params: RedisParams) -> dict[str, str]:
    return parse_info(await with_redis(ctx, params, info_text))


class ServerInfo(Result):
    version: str | None
    mode: str | None
    role: str | None
    uptime_s: int | None
    connected_clients: int | None
    blocked_clients: int | None
    maxclients: int | None
    used_memory_bytes: int | None
    maxmemory_bytes: int | None
    total_keys: int
    ops_per_second: int | None
    total_commands: int | None
    rejected_connections: int | None
    evicted_keys: int | None
    expired_keys: int | None
    keyspace_hit_percent: float | None


def server_info(info: Mapping[str, str], own_connections: int = 0) -> ServerInfo:
    """The summary of INFO; ``own_connections`` of its connected clients (the reader's) are left out."""
    connected = integer(info, "connected_clients")
    return ServerInfo(
        version=info.get("redis_version"),
        mode=info.get("redis_mode"),
        role=info.get("role"),
        uptime_s=integer(info, "uptime_in_seconds"),
        connected_clients=max(connected - own_connections, 0) if connected is not None else None,
        blocked_clients=integer(info, "blocked_clients"),
        maxclients=integer(info, "maxclients"),
        used_memory_bytes=integer(info, "used_memory"),
        maxmemory_bytes=integer(info, "maxmemory"),
        total_keys=sum(db.get("keys", 0) for db in keyspace(info).values()),
        ops_per_second=integer(info, "instantaneous_ops_per_sec"),
        total_commands=integer(info, "total_commands_processed"),
        rejected_connections=integer(info, "rejected_connections"),
        evicted_keys=integer(info, "evicted_keys"),
        expired_keys=integer(info, "expired_keys"),
        keyspace_hit_percent=hit_percent(integer(info, "keyspace_hits"), integer(info, "keyspace_misses")),
    )


@PACK.probe(
    "redis.server.info",
    """Redis at a glance: version, mode, role, uptime, connected and blocked clients against
    maxclients, used memory and maxmemory in bytes, total keys, ops per second, commands
    processed, connections rejected (maxclients reached), keys evicted and expired since
    start, and the keyspace hit percent. The probe's own connection is left out of the
    connected clients (the connections of other Sonde probes running beside it are not:
    Redis cannot count them without listing every client).""",
    timeout_s=15,
)
@one_turn
async def redis_server_info(ctx: ProbeContext, params: RedisParams) -> ServerInfo:
    return server_info(await read_info(ctx, params), OWN_CONNECTIONS)


class Database(Result):
    db: int
    keys: int
    expires: int
    avg_ttl_ms: int | None  # null: no key has a TTL, or Redis has no estimate yet


class Keyspace(Result):
    total_keys: int
    databases: list[Database]


def keyspace_databases(info: Mapping[str, str]) -> list[Database]:
    """INFO's ``dbN`` lines. Redis says ``avg_ttl=0`` both when no key has a TTL and before it has
    sampled any (its expire cycle estimates it): either reads null here, not "expire at once"."""
    databases = []
    for db, counts in keyspace(info).items():
        expires, avg_ttl = counts.get("expires", 0), counts.get("avg_ttl")
        databases.append(
            Database(
                db=db,
                keys=counts.get("keys", 0),
                expires=expires,
                avg_ttl_ms=avg_ttl if expires and avg_ttl else None,
            )
        )
    return databases


@PACK.probe(
    "redis.keyspace.summary",
    """Keys per Redis database: key count, keys with a TTL (`expires`) and `avg_ttl_ms`,
    Redis's estimate of the time left to those keys, in ms, from a sample its expire cycle
    takes: null when no key has a TTL or Redis has no estimate yet (it says 0 for both);
    with the total. Use it to see which database holds the data and whether keys expire.""",
    timeout_s=15,
)
@one_turn
async def redis_keyspace(ctx: ProbeContext, params: RedisParams) -> Keyspace:
    databases = keyspace_databases(await read_info(ctx, params))
    return Keyspace(total_keys=sum(d.keys for d in databases), databases=databases)


class SlowlogParams(RedisParams):
    limit: int = Field(default=20, ge=1, le=128, strict=True, description="The latest N entries.")


class SlowEntry(Result):
    id: int
    time: str | None  # None for a time past the year 9999 (`iso_utc`)
    duration_us: int
    command: str
    client: str | None
    client_name: str | None


class Slowlog(Result):
    length: int
    entries: list[SlowEntry]
    truncated: bool


def _slowlog(client: Any, limit: int) -> tuple[int, list[Sequence[Any]]]:
    """The log's length and its latest ``limit`` entries as Redis sends them: redis-py's
    ``slowlog_get`` joins a command's words with spaces, and a word may hold one."""
    from redis.client import NEVER_DECODE  # as slowlog_get: a word may not be UTF-8

    client.set_response_callback("SLOWLOG GET", lambda response, **options: response)
    return int(client.slowlog_len()), list(client.execute_command("SLOWLOG GET", limit, **{NEVER_DECODE: []}))


def as_text(value: bytes | str | None) -> str:
    """A slow log field as text: redis-py leaves them bytes (even with decode_responses), and data may not be UTF-8."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""


def slow_entry(item: Sequence[Any], shown: bool) -> SlowEntry:
    """One entry of ``SLOWLOG GET``: id, start, duration, the command's words (Redis Enterprise
    puts a complexity before them), client address and name. The command reads as ``redis-cli``
    shows it (``EVAL ... 0``), its arguments after the first as ``?`` unless ``shown``."""
    at = 3 if isinstance(item[3], list | tuple) else 4
    words = [as_text(word) for word in item[at]]
    command = " ".join(words if shown else masked_command(words))
    client, name = (as_text(item[i]) if len(item) > i else "" for i in (at + 1, at + 2))
    return SlowEntry(
        id=int(item[0]),
        time=iso_utc(int(item[1])),
        duration_us=int(item[2]),
        command=command if len(command) <= COMMAND_MAX_CHARS else command[: COMMAND_MAX_CHARS - 1] + "…",
        client=client or None,
        client_name=name or None,
    )


@PACK.probe(
    "redis.slowlog.entries",
    """The latest Redis slow log entries (commands slower than slowlog-log-slower-than):
    id, time, duration in µs, the command and its first argument (a key, mostly; an EVAL's
    script with its literals as '?') as text, space-separated as in `redis-cli slowlog get`,
    each further argument as '?' (they hold data; packs.redis.show_values true in the agent
    config shows them), bytes that are not
    UTF-8 read as U+FFFD, cut to 200 characters; client address and name; with the log
    length.""",
    timeout_s=15,
)
@one_turn
async def redis_slowlog(ctx: ProbeContext, params: SlowlogParams) -> Slowlog:
    length, raw = await with_redis(ctx, params, lambda client: _slowlog(client, params.limit))
    shown = values_shown(ctx, "redis")
    return Slowlog(length=length, entries=[slow_entry(r, shown) for r in raw], truncated=length > len(raw))


class Replica(Result):
    address: str
    state: str | None
    offset: int | None
    lag_bytes: int | None
    lag_s: int | None


class Replication(Result):
    role: str | None
    connected_replicas: int | None
    replicas: list[Replica]
    master_offset: int | None
    master_host: str | None
    master_port: int | None
    master_link_status: str | None
    master_last_io_s: int | None
    master_link_down_s: int | None
    sync_in_progress: bool | None


def replication(info: Mapping[str, str]) -> Replication:
    master_offset = integer(info, "master_repl_offset")
    rows = []
    for replica in replicas(info):
        offset = integer(replica, "offset")
        rows.append(
            Replica(
                address=f"{replica.get('ip')}:{replica.get('port')}",
                state=replica.get("state"),
                offset=offset,
                lag_bytes=master_offset - offset
                if master_offset is not None and offset is not None
                else None,
                lag_s=integer(replica, "lag"),
            )
        )
    sync = info.get("master_sync_in_progress")
    return Replication(
        role=info.get("role"),
        connected_replicas=integer(info, "connected_slaves"),
        replicas=rows,
        master_offset=master_offset,
        master_host=info.get("master_host"),
        master_port=integer(info, "master_port"),
        master_link_status=info.get("master_link_status"),
        master_last_io_s=integer(info, "master_last_io_seconds_ago"),
        master_link_down_s=integer(info, "master_link_down_since_seconds"),
        sync_in_progress=sync == "1" if sync is not None else None,
    )


@PACK.probe(
    "redis.replication.status",
    """Redis replication: role; on a primary each replica's address, state, offset, lag in
    bytes and seconds; on a replica its primary, link status (up/down), seconds since the
    last I/O with it, how long the link has been down and whether a sync is in progress.""",
    timeout_s=15,
)
@one_turn
async def redis_replication(ctx: ProbeContext, params: RedisParams) -> Replication:
    return replication(await read_info(ctx, params))

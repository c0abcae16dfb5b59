"""PostgreSQL as a whole: databases and their sizes, replication, and the buffer cache hit ratio."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.connection import SONDE_APPLICATION, PostgresParams, run_queries
from sonde.packs.postgres.visibility import (
    CLIENT_SESSIONS,
    DETAILS_HIDDEN,
    NOT_SONDE,
    SEES_ALL,
    visibility_note,
)

# client connections per database, Sonde's own sessions (application 'sonde') counted apart; and of
# the connections, those whose details this login may not see
CLIENTS_BY_DATABASE = f"""
SELECT datid, count(*) FILTER (WHERE {NOT_SONDE}) AS connections,
       count(*) FILTER (WHERE application_name = '{SONDE_APPLICATION}') AS sonde_sessions,
       count(*) FILTER (WHERE {NOT_SONDE} AND {DETAILS_HIDDEN}) AS hidden_sessions
FROM pg_stat_activity WHERE {CLIENT_SESSIONS} GROUP BY datid"""
DATABASES = f"""
SELECT d.datname AS name, pg_encoding_to_char(d.encoding) AS encoding, d.datallowconn AS allows_connections,
       d.datistemplate AS is_template,
       CASE WHEN has_database_privilege(d.datname, 'CONNECT') THEN pg_database_size(d.datname) END AS size_bytes,
       coalesce(a.connections, 0) AS connections, coalesce(a.sonde_sessions, 0) AS sonde_sessions,
       coalesce(a.hidden_sessions, 0) AS hidden_sessions
FROM pg_database d LEFT JOIN ({CLIENTS_BY_DATABASE}) a ON a.datid = d.oid
WHERE %s OR NOT d.datistemplate
ORDER BY size_bytes DESC NULLS LAST, d.datname"""
IN_RECOVERY = "SELECT pg_is_in_recovery() AS in_recovery"
# host(): the address alone ("10.0.0.2", not "10.0.0.2/32"), NULL for a unix socket
REPLICAS = """
SELECT application_name, host(client_addr) AS client, state, sync_state,
       pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS replay_lag_bytes,
       extract(epoch FROM write_lag)::float8 AS write_lag_s,
       extract(epoch FROM flush_lag)::float8 AS flush_lag_s,
       extract(epoch FROM replay_lag)::float8 AS replay_lag_s
FROM pg_stat_replication ORDER BY application_name"""
SLOTS = """
SELECT slot_name AS name, slot_type AS type, active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS retained_wal_bytes
FROM pg_replication_slots ORDER BY slot_name"""
STANDBY = """
SELECT pg_last_wal_receive_lsn()::text AS receive_lsn, pg_last_wal_replay_lsn()::text AS replay_lsn,
       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END AS replay_delay_s,
       (SELECT status FROM pg_stat_wal_receiver LIMIT 1) AS receiver_status"""
CACHE = """
SELECT datname AS name, blks_hit AS hits, blks_read AS reads
FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY blks_read DESC, datname"""


class DatabasesParams(PostgresParams):
    include_templates: bool = Field(default=False, strict=True, description="List template0/template1 too.")
    limit: int = Field(default=100, ge=1, le=1000, strict=True, description="At most this many databases.")


class Database(Result):
    name: str
    encoding: str
    allows_connections: bool
    is_template: bool
    size_bytes: int | None
    connections: int
    sonde_sessions: int


class Databases(Result):
    databases: list[Database]
    total: int
    total_size_bytes: int
    left_out_of_total: int
    truncated: bool
    sees_all_sessions: bool
    hidden_sessions: int
    visibility: str | None


def databases_listing(rows: list[dict[str, Any]], limit: int, sees_all: bool) -> Databases:
    """Totals over every row, a size this user may not see left out (and counted); the first ``limit`` listed.

    ``sees_all``: this login sees every session's details (`SEES_ALL_SESSIONS`).
    """
    hidden = sum(row["hidden_sessions"] for row in rows)
    consequence = (
        f"{hidden} client sessions of other users are counted in their databases' connections (a "
        "background worker connected to a database cannot be told apart from them)."
    )
    return Databases(
        databases=[Database(**{key: row[key] for key in Database.model_fields}) for row in rows[:limit]],
        total=len(rows),
        total_size_bytes=sum(row["size_bytes"] for row in rows if row["size_bytes"] is not None),
        left_out_of_total=sum(1 for row in rows if row["size_bytes"] is None),
        truncated=len(rows) > limit,
        sees_all_sessions=sees_all,
        hidden_sessions=hidden,
        visibility=visibility_note(sees_all, consequence),
    )


@PACK.probe(
    "postgres.databases.sizes",
    """PostgreSQL databases, largest first: name, encoding, size in bytes (null where this
    user may not connect), whether it allows connections, and current client connections,
    leaving out Sonde's own sessions (application 'sonde'), which are counted in
    `sonde_sessions` instead; with the number of databases and their total size, both
    over every database (templates only with include_templates), not just the `limit`
    listed. A database whose size this user may not read is left out of the total size
    and counted in `left_out_of_total` (0: the total is complete). A login without
    pg_monitor still counts other users' connections (`hidden_sessions` of them, their
    details hidden; `sees_all_sessions` false and `visibility` saying so). Use it for
    'what fills the disk' on a database server.""",
    timeout_s=20,
)
async def databases_sizes(ctx: ProbeContext, params: DatabasesParams) -> Databases:
    rows, [sees] = await run_queries(ctx, params, (DATABASES, (params.include_templates,)), (SEES_ALL, ()))
    return databases_listing(rows, params.limit, sees["sees_all"])


class Replica(Result):
    application_name: str | None
    client: str | None
    state: str | None
    sync_state: str | None
    replay_lag_bytes: int | None
    write_lag_s: float | None
    flush_lag_s: float | None
    replay_lag_s: float | None


class Slot(Result):
    name: str
    type: str
    active: bool
    retained_wal_bytes: int | None


class StandbyState(Result):
    receive_lsn: str | None
    replay_lsn: str | None
    replay_delay_s: float | None
    receiver_status: str | None


class Replication(Result):
    role: Literal["primary", "standby"]
    replicas: list[Replica]
    slots: list[Slot]
    standby: StandbyState | None


@PACK.probe(
    "postgres.replication.status",
    """Replication seen from this server. On a primary: each replica's state, sync state,
    lag in bytes and write/flush/replay lag in seconds, and the replication slots with the
    WAL each retains (an inactive slot keeps WAL forever). On a standby: received and
    replayed WAL positions, replay delay in seconds and the WAL receiver status.""",
    timeout_s=15,
)
async def replication_status(ctx: ProbeContext, params: PostgresParams) -> Replication:
    [[recovery]] = await run_queries(ctx, params, (IN_RECOVERY, ()))
    if recovery["in_recovery"]:
        [[standby]] = await run_queries(ctx, params, (STANDBY, ()))
        return Replication(role="standby", replicas=[], slots=[], standby=StandbyState(**standby))
    replicas, slots = await run_queries(ctx, params, (REPLICAS, ()), (SLOTS, ()))
    return Replication(
        role="primary",
        replicas=[Replica(**row) for row in replicas],
        slots=[Slot(**row) for row in slots],
        standby=None,
    )


class DatabaseCache(Result):
    name: str
    hits: int
    reads: int
    hit_percent: float | None


class CacheHitRatio(Result):
    hit_percent: float | None
    hits: int
    reads: int
    databases: list[DatabaseCache]
    truncated: bool


class CacheParams(PostgresParams):
    limit: int = Field(
        default=50, ge=1, le=1000, strict=True, description="Databases listed, most disk reads first."
    )


def hit_percent(hits: int | Decimal, reads: int | Decimal) -> float | None:
    total = hits + reads
    return round(float(hits) * 100 / float(total), 2) if total else None


def cache_ratio(rows: list[dict[str, Any]], limit: int) -> CacheHitRatio:
    """Totals over every row of ``rows``; the first ``limit`` rows listed per database."""
    hits = sum(int(row["hits"]) for row in rows)
    reads = sum(int(row["reads"]) for row in rows)
    return CacheHitRatio(
        hit_percent=hit_percent(hits, reads),
        hits=hits,
        reads=reads,
        databases=[
            DatabaseCache(
                name=row["name"],
                hits=row["hits"],
                reads=row["reads"],
                hit_percent=hit_percent(row["hits"], row["reads"]),
            )
            for row in rows[:limit]
        ],
        truncated=len(rows) > limit,
    )


@PACK.probe(
    "postgres.cache.hit_ratio",
    """Buffer cache hit ratio since the statistics were last reset: blocks found in shared
    buffers vs read from disk (or the OS cache), in percent, overall and per database.
    Below about 90 % on a busy server, shared_buffers may be too small for the working set.""",
    timeout_s=15,
)
async def cache_hit_ratio(ctx: ProbeContext, params: CacheParams) -> CacheHitRatio:
    [rows] = await run_queries(ctx, params, (CACHE, ()))
    return cache_ratio(rows, params.limit)

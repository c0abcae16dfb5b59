"""PostgreSQL as a whole: databases, their sizes and transaction ID ages, replication and WAL archiving."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.activity import seconds_since
from sonde.packs.postgres.connection import SONDE_APPLICATION, PostgresParams, one_turn, run_queries
from sonde.packs.postgres.visibility import (
    CLIENT_SESSIONS,
    DETAILS_HIDDEN,
    NOT_SONDE,
    SEES_ALL,
    SEES_ALL_SESSIONS,
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
       CASE WHEN has_database_privilege(d.datname, 'CONNECT') OR {SEES_ALL_SESSIONS}
            THEN pg_database_size(d.datname) END AS size_bytes,
       coalesce(a.connections, 0) AS connections, coalesce(a.sonde_sessions, 0) AS sonde_sessions,
       coalesce(a.hidden_sessions, 0) AS hidden_sessions
FROM pg_database d LEFT JOIN ({CLIENTS_BY_DATABASE}) a ON a.datid = d.oid
WHERE %s OR NOT d.datistemplate
ORDER BY size_bytes DESC NULLS LAST, d.datname"""
IN_RECOVERY = "SELECT pg_is_in_recovery() AS in_recovery"
# host(): the address alone ("10.0.0.2", not "10.0.0.2/32"), NULL for a unix socket. A login without
# pg_read_all_stats (pg_monitor) gets a row per walsender with its application, user and pid only:
# state, positions and lags read NULL (hidden)
REPLICAS = """
SELECT application_name, host(client_addr) AS client, state, sync_state, state IS NULL AS hidden,
       pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS replay_lag_bytes,
       extract(epoch FROM write_lag)::float8 AS write_lag_s,
       extract(epoch FROM flush_lag)::float8 AS flush_lag_s,
       extract(epoch FROM replay_lag)::float8 AS replay_lag_s
FROM pg_stat_replication ORDER BY application_name"""
# wal_status (PostgreSQL 13+): 'lost' once the WAL the slot needs was removed (max_slot_wal_keep_size)
SLOTS = """
SELECT slot_name AS name, slot_type AS type, active, wal_status, safe_wal_size::bigint AS safe_wal_bytes,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint AS retained_wal_bytes
FROM pg_replication_slots ORDER BY slot_name"""
# pg_stat_wal_receiver has a row while a WAL receiver runs, visible (pid only) to every login; its
# status and sender only with pg_read_all_stats. restore_command and primary_conninfo are told as set
# or not, never their text (either may hold a password); NULL where this login may not read them
# (primary_conninfo needs pg_read_all_settings).
STANDBY = f"""
SELECT pg_last_wal_receive_lsn()::text AS receive_lsn, pg_last_wal_replay_lsn()::text AS replay_lsn,
       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 END AS replay_delay_s,
       pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint AS receive_replay_gap_bytes,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8 AS last_replayed_xact_s,
       pg_is_wal_replay_paused() AS replay_paused,
       EXISTS (SELECT 1 FROM pg_stat_wal_receiver) AS receiver_running,
       (SELECT status FROM pg_stat_wal_receiver LIMIT 1) AS receiver_status,
       (SELECT sender_host || ':' || sender_port FROM pg_stat_wal_receiver LIMIT 1) AS primary_address,
       (SELECT extract(epoch FROM now() - last_msg_receipt_time)::float8 FROM pg_stat_wal_receiver LIMIT 1)
         AS receiver_last_message_s,
       (SELECT setting <> '' FROM pg_settings WHERE name = 'restore_command') AS restore_command_set,
       (SELECT setting <> '' FROM pg_settings WHERE name = 'primary_conninfo') AS primary_conninfo_set,
       {SEES_ALL_SESSIONS} AS sees_all"""
# WAL archiving: failing when the last failure is newer than the last success (the archiver retries
# the same segment until it goes, and keeps every later one in pg_wal meanwhile)
ARCHIVER = """
SELECT current_setting('archive_mode') AS archive_mode, archived_count, failed_count,
       last_archived_wal, last_archived_time::text AS last_archived_at,
       extract(epoch FROM now() - last_archived_time)::float8 AS last_archived_s,
       last_failed_wal, last_failed_time::text AS last_failed_at,
       extract(epoch FROM now() - last_failed_time)::float8 AS last_failed_s,
       coalesce(last_failed_time > last_archived_time
                OR (last_failed_time IS NOT NULL AND last_archived_time IS NULL), false) AS failing
FROM pg_stat_archiver"""
# Transaction IDs (and multixact IDs) wrap around at 2^31 of age: before that the server stops
# assigning new ones (no more writes) until the oldest database is vacuumed. Readable by every login.
WRAPAROUND = """
SELECT datname AS name, datallowconn AS allows_connections, age(datfrozenxid)::bigint AS xid_age,
       mxid_age(datminmxid)::bigint AS multixact_age
FROM pg_database ORDER BY greatest(age(datfrozenxid), mxid_age(datminmxid)) DESC, datname"""
FREEZE_SETTINGS = """
SELECT current_setting('autovacuum_freeze_max_age')::bigint AS autovacuum_freeze_max_age,
       current_setting('autovacuum_multixact_freeze_max_age')::bigint AS autovacuum_multixact_freeze_max_age,
       current_setting('autovacuum')::bool AS autovacuum"""


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
    user may neither connect nor read all statistics, as pg_monitor may), whether it allows connections, and current client connections,
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
@one_turn
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
    hidden: bool


class Slot(Result):
    name: str
    type: str
    active: bool
    wal_status: str | None
    safe_wal_bytes: int | None
    retained_wal_bytes: int | None


class StandbyState(Result):
    receive_lsn: str | None
    replay_lsn: str | None
    replay_delay_s: float | None
    receive_replay_gap_bytes: int | None
    last_replayed_xact_s: float | None
    replay_paused: bool
    receiver_running: bool
    receiver_status: str | None
    primary_address: str | None
    receiver_last_message_s: float | None
    restore_command_set: bool | None
    primary_conninfo_set: bool | None


class Archiver(Result):
    archive_mode: str
    archived_count: int
    failed_count: int
    last_archived_wal: str | None
    last_archived_at: str | None
    last_archived_s: float | None
    last_failed_wal: str | None
    last_failed_at: str | None
    last_failed_s: float | None
    failing: bool


class Replication(Result):
    role: Literal["primary", "standby"]
    replicas: list[Replica]
    slots: list[Slot]
    standby: StandbyState | None
    archiver: Archiver
    sees_all_sessions: bool
    hidden_replicas: int
    visibility: str | None


def with_ages(row: dict[str, Any], ages: tuple[str, ...]) -> dict[str, Any]:
    """``row`` with its ``ages`` read against the probe's transaction start (`seconds_since`)."""
    return {**row, **{key: seconds_since(row[key]) for key in ages}}


def standby_state(row: dict[str, Any]) -> StandbyState:
    """`STANDBY`'s row, its ages never below 0."""
    values = {key: row[key] for key in StandbyState.model_fields}
    return StandbyState(
        **with_ages(values, ("replay_delay_s", "last_replayed_xact_s", "receiver_last_message_s"))
    )


def archiver_state(row: dict[str, Any]) -> Archiver:
    """`ARCHIVER`'s row, its ages never below 0."""
    return Archiver(**with_ages(row, ("last_archived_s", "last_failed_s")))


def replication_reading(
    replicas: list[dict[str, Any]],
    slots: list[dict[str, Any]],
    standby: dict[str, Any] | None,
    archiver: dict[str, Any],
    sees_all: bool,
) -> Replication:
    """A primary's `REPLICAS` and `SLOTS` rows, or a standby's `STANDBY` row, with what this login could not see."""
    hidden = sum(1 for row in replicas if row["hidden"])
    if standby is not None:
        consequence = (
            "Of this standby's WAL receiver it sees whether one runs, not its status, its primary's "
            "address or when it last heard from it, and not whether primary_conninfo is set."
        )
    elif replicas:
        consequence = (
            "Of each replica streaming from this primary it sees the application and user only, not its "
            f"state or lag: {hidden} of the {len(replicas)} listed cannot be checked for lag."
        )
    else:
        consequence = (
            "Of a replica streaming from this primary it would see the application and user only, not "
            "its state or lag; none streams from it now."
        )
    return Replication(
        role="standby" if standby is not None else "primary",
        replicas=[Replica(**row) for row in replicas],
        slots=[Slot(**row) for row in slots],
        standby=None if standby is None else standby_state(standby),
        archiver=archiver_state(archiver),
        sees_all_sessions=sees_all,
        hidden_replicas=hidden,
        visibility=visibility_note(sees_all, consequence),
    )


@PACK.probe(
    "postgres.replication.status",
    """Replication seen from this server. On a primary: each replica's state, sync state,
    lag in bytes and write/flush/replay lag in seconds, and the replication slots with the
    WAL each retains (an inactive slot keeps WAL forever) and their wal_status ('lost': the
    WAL its consumer needs is gone, it can never catch up). On a standby: received and
    replayed WAL positions, replay delay in seconds (0 when all that was received is
    replayed, even with no primary sending more), the received-but-not-replayed gap in
    bytes, seconds since the last replayed transaction, whether replay is paused
    (pg_wal_replay_pause), whether a WAL receiver runs (`receiver_running` false: the
    standby is not streaming from its primary) with its status, primary address and
    seconds since its last message, and whether restore_command and primary_conninfo are
    set (never their text). On both: WAL archiving (pg_stat_archiver: archive_mode,
    archived and failed counts, the last archived and failed segment and when, `failing`
    when the last failure is newer than the last success). A login without pg_monitor sees
    of each replica only its application and user (`hidden` true, state and lag null), and
    of a standby's WAL receiver only that it runs: `sees_all_sessions` is then false,
    `hidden_replicas` counts the replicas it cannot judge and `visibility` says so.""",
    timeout_s=15,
)
@one_turn
async def replication_status(ctx: ProbeContext, params: PostgresParams) -> Replication:
    [[recovery], [archiver]] = await run_queries(ctx, params, (IN_RECOVERY, ()), (ARCHIVER, ()))
    if recovery["in_recovery"]:
        [[standby]] = await run_queries(ctx, params, (STANDBY, ()))
        return replication_reading([], [], standby, archiver, standby["sees_all"])
    replicas, slots, [sees] = await run_queries(ctx, params, (REPLICAS, ()), (SLOTS, ()), (SEES_ALL, ()))
    return replication_reading(replicas, slots, None, archiver, sees["sees_all"])


WRAPAROUND_AGE = 2**31  # the age at which IDs would wrap around; the server stops 3 million short (14+)


def wraparound_percent(age: int) -> float:
    return round(age * 100 / WRAPAROUND_AGE, 1)


class DatabaseAge(Result):
    name: str
    allows_connections: bool
    xid_age: int
    multixact_age: int
    wraparound_percent: float


class Wraparound(Result):
    databases: list[DatabaseAge]
    oldest: DatabaseAge | None
    truncated: bool
    autovacuum: bool
    autovacuum_freeze_max_age: int
    autovacuum_multixact_freeze_max_age: int


class WraparoundParams(PostgresParams):
    limit: int = Field(default=20, ge=1, le=1000, strict=True, description="Databases listed, oldest first.")


def wraparound_reading(rows: list[dict[str, Any]], settings: dict[str, Any], limit: int) -> Wraparound:
    """`WRAPAROUND` rows (oldest first) and `FREEZE_SETTINGS`: the first ``limit`` listed."""
    ages = [
        DatabaseAge(**row, wraparound_percent=wraparound_percent(max(row["xid_age"], row["multixact_age"])))
        for row in rows
    ]
    return Wraparound(
        databases=ages[:limit], oldest=ages[0] if ages else None, truncated=len(ages) > limit, **settings
    )


@PACK.probe(
    "postgres.vacuum.wraparound",
    """Transaction ID wraparound: for each database (templates too), oldest first, the age of
    its oldest unfrozen transaction ID (age(datfrozenxid)) and multixact ID
    (mxid_age(datminmxid)), and `wraparound_percent`, the older of the two as a percent of
    2^31, where the server stops accepting writes (3 million short of it; 1 million before
    PostgreSQL 14) until the
    database is vacuumed; with `oldest` over every database, and autovacuum's
    autovacuum_freeze_max_age, past which it vacuums a database to freeze it whatever
    else. An age far past that means those vacuums fail or are held back (a long
    transaction, a prepared transaction, a replication slot's xmin). Readable by every
    login.""",
    timeout_s=15,
)
@one_turn
async def vacuum_wraparound(ctx: ProbeContext, params: WraparoundParams) -> Wraparound:
    rows, [settings] = await run_queries(ctx, params, (WRAPAROUND, ()), (FREEZE_SETTINGS, ()))
    return wraparound_reading(rows, settings, params.limit)

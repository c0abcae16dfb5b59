"""What PostgreSQL's clients are doing: connections by state, long-running queries.

All of it reads ``pg_stat_activity`` (client sessions only, the probe's own
session left out; the connection counts and the long-running list leave out
every Sonde session). Other users' sessions are counted even where this login
may not see their details (`sonde.packs.postgres.visibility`), and the answers
say what was hidden. Blocked sessions: `sonde.packs.postgres.locks`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.connection import SONDE_APPLICATION, PostgresParams, one_turn, run_queries
from sonde.packs.postgres.visibility import (
    CLIENT_SESSIONS,
    DETAILS_HIDDEN,
    NOT_SONDE,
    SEES_ALL_SESSIONS,
    visibility_note,
)
from sonde.packs.query_values import shown_query, values_shown

QUERY_MAX_CHARS = 1000
CLIENTS = f"{CLIENT_SESSIONS} AND pid <> pg_backend_pid()"
HIDDEN_STATE = "hidden"  # by_state's name for the sessions whose state this login may not see

# One statement, so one reading of pg_stat_activity: every figure agrees with the others.
CONNECTION_COUNTS = f"""
SELECT CASE WHEN {DETAILS_HIDDEN} THEN '{HIDDEN_STATE}' ELSE coalesce(state, 'unknown') END AS state,
coalesce(datname, '') AS database, coalesce(usename, '') AS user,
application_name = '{SONDE_APPLICATION}' AS sonde, {DETAILS_HIDDEN} AS hidden, count(*) AS n
FROM pg_stat_activity WHERE {CLIENTS} GROUP BY 1, 2, 3, 4, 5"""
TOP_COUNTED = 20
# reserved_connections (PostgreSQL 16+: slots for members of pg_use_reserved_connections) reads NULL before 16
SETTINGS = f"""
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved,
       current_setting('reserved_connections', true)::int AS reserved_connections,
       current_setting('server_version') AS version, {SEES_ALL_SESSIONS} AS sees_all"""
IDLE_IN_TRANSACTION = "'idle in transaction', 'idle in transaction (aborted)'"
# client_addr is an inet ("127.0.0.1/32" as text); host() is the address alone, NULL for a unix socket
SESSION_COLUMNS = f"""
pid, usename AS user, datname AS database, application_name, host(client_addr) AS client,
state, wait_event_type, wait_event,
extract(epoch FROM now() - query_start)::float8 AS duration_s,
extract(epoch FROM now() - xact_start)::float8 AS transaction_s,
CASE WHEN state IN ({IDLE_IN_TRANSACTION}) THEN extract(epoch FROM now() - state_change)::float8 END AS idle_s,
left(query, {QUERY_MAX_CHARS}) AS query"""
# a transaction open for an hour that runs short statements is as long-running as one long statement
RUNNING_SINCE = "coalesce(xact_start, query_start)"
LONG_RUNNING = f"""
SELECT {SESSION_COLUMNS} FROM pg_stat_activity
WHERE {CLIENTS} AND {NOT_SONDE} AND state IS DISTINCT FROM 'idle'
  AND {RUNNING_SINCE} < now() - make_interval(secs => %s)
ORDER BY {RUNNING_SINCE} LIMIT %s"""
# the sessions whose start times this login may not see: long-running or not, it cannot tell
UNJUDGED = f"""
SELECT {SEES_ALL_SESSIONS} AS sees_all, count(*) FILTER (WHERE {DETAILS_HIDDEN}) AS n
FROM pg_stat_activity WHERE {CLIENTS} AND {NOT_SONDE}"""


class Counted(Result):
    name: str
    connections: int


class ConnectionUsage(Result):
    server_version: str
    max_connections: int
    superuser_reserved: int
    reserved_connections: int | None
    client_limit: int
    total: int
    usage_percent: float
    free_client_slots: int
    clients_refused: bool
    by_state: dict[str, int]
    by_database: list[Counted]
    by_user: list[Counted]
    sonde_sessions: int
    sees_all_sessions: bool
    hidden_sessions: int
    visibility: str | None


def top_counted(counts: dict[str, int]) -> list[Counted]:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_COUNTED]
    return [Counted(name=name, connections=n) for name, n in ranked]


def client_limit(limits: dict[str, Any]) -> int:
    """The connections a role that is no superuser (nor, on 16+, member of pg_use_reserved_connections) may open.

    The server refuses such a login once fewer than superuser_reserved_connections +
    reserved_connections of the max_connections slots are free (its own slot already taken):
    with 17 client sessions on max_connections 20 and 3 reserved, the 18th was refused.
    """
    reserved = int(limits["reserved"]) + int(limits["reserved_connections"] or 0)
    # at least 1: the server refuses to start unless the reserved slots are fewer than max_connections
    return max(int(limits["max_connections"]) - reserved, 1)


def connection_usage(rows: list[dict[str, Any]], limits: dict[str, Any]) -> ConnectionUsage:
    """The usage from `CONNECTION_COUNTS` rows: Sonde's own sessions counted apart, not in the figures.

    Usage is measured against `client_limit`, the slots ordinary clients may use, not
    max_connections: at 100 % the server already refuses them.
    """
    by_state: dict[str, int] = {}
    by_database: dict[str, int] = {}
    by_user: dict[str, int] = {}
    sonde = hidden = 0
    for row in rows:
        if row["sonde"]:
            sonde += row["n"]
            continue
        hidden += row["n"] if row["hidden"] else 0
        for counts, key in ((by_state, row["state"]), (by_database, row["database"]), (by_user, row["user"])):
            counts[key] = counts.get(key, 0) + row["n"]
    total = sum(by_state.values())
    usable = client_limit(limits)
    consequence = (
        f"{hidden} client sessions of other users are counted, with state '{HIDDEN_STATE}' (a background "
        "worker connected to a database cannot be told apart from them)."
    )
    return ConnectionUsage(
        server_version=limits["version"],
        max_connections=limits["max_connections"],
        superuser_reserved=limits["reserved"],
        reserved_connections=limits["reserved_connections"],
        client_limit=usable,
        total=total,
        usage_percent=round(total * 100 / usable, 1),
        free_client_slots=max(usable - total, 0),
        clients_refused=total >= usable,
        by_state=dict(sorted(by_state.items())),
        by_database=top_counted(by_database),
        by_user=top_counted(by_user),
        sonde_sessions=sonde,
        sees_all_sessions=limits["sees_all"],
        hidden_sessions=hidden,
        visibility=visibility_note(limits["sees_all"], consequence),
    )


@PACK.probe(
    "postgres.connections.usage",
    """PostgreSQL client connections against the slots ordinary clients may use: total, and
    `usage_percent` of `client_limit`, which is max_connections less
    superuser_reserved_connections and (PostgreSQL 16+) reserved_connections, the raw
    figures shown too; `free_client_slots` left to roles that are not superusers, and
    `clients_refused` true when none is left (the server already refuses their logins).
    With counts by state (active, idle, idle in transaction, ...), and the top databases
    and users by connections; plus the server version. Every figure comes from one reading, and leaves
    out Sonde's own sessions (this probe's and its siblings' running beside it, application
    'sonde'), which are counted in `sonde_sessions` instead. A login without pg_monitor
    still counts other users' sessions, but not their state: they are counted under state
    'hidden' and in `hidden_sessions`, `sees_all_sessions` is false and `visibility` says
    what is hidden. Use it for 'too many connections' errors.""",
    timeout_s=15,
)
@one_turn
async def connections_usage(ctx: ProbeContext, params: PostgresParams) -> ConnectionUsage:
    rows, settings = await run_queries(ctx, params, (CONNECTION_COUNTS, ()), (SETTINGS, ()))
    return connection_usage(rows, settings[0])


class Session(Result):
    pid: int
    user: str | None
    database: str | None
    application_name: str | None
    client: str | None
    state: str | None
    wait_event_type: str | None
    wait_event: str | None
    duration_s: float | None
    transaction_s: float | None
    idle_s: float | None
    query: str | None


class LongParams(PostgresParams):
    min_duration_s: float = Field(
        default=60, ge=0, le=86_400, strict=True, description="Running at least this long."
    )
    limit: int = Field(default=20, ge=1, le=200, strict=True, description="At most this many queries.")


class LongRunning(Result):
    min_duration_s: float
    queries: list[Session]
    truncated: bool
    unjudged_sessions: int
    sees_all_sessions: bool
    visibility: str | None


def seconds_since(value: float | None) -> float | None:
    """Seconds since a start read against the probe's own transaction start, ``now()``.

    A statement begun after it (a sibling's, a busy client's) reads 0, not less.
    """
    return None if value is None else max(value, 0.0)


def session(row: dict[str, Any], shown: bool) -> Session:
    """A session's row; its query's values as ``?`` unless ``shown`` (`sonde.packs.query_values`)."""
    values = {key: row[key] for key in Session.model_fields}
    for key in ("duration_s", "transaction_s", "idle_s"):
        values[key] = seconds_since(values[key])
    values["query"] = shown_query(values["query"], "postgres", shown)
    return Session(**values)


@PACK.probe(
    "postgres.queries.long_running",
    """Queries and open transactions running for at least `min_duration_s` seconds, longest
    first, both judged by when the transaction started (when the statement did outside
    one): a transaction open for an hour that runs short statements, or sits 'idle in
    transaction', is listed. Each with PID, user, database, application, client, state,
    what it waits on, seconds its current (or last) statement has run (`duration_s`),
    seconds in its transaction (`transaction_s`), seconds since its last statement ended
    for one idle in a transaction (`idle_s`, null otherwise: such a session holds its locks
    and keeps VACUUM from cleaning up), and the query (cut to 1000 characters; its values,
    string and number literals, as '?' unless packs.postgres.show_values is true in the
    agent config).
    Sonde's own sessions (application 'sonde') are left out. A login without pg_monitor
    cannot see when other users' sessions started: they are not listed but counted in
    `unjudged_sessions`, `sees_all_sessions` is false and `visibility` says so.""",
    timeout_s=15,
)
@one_turn
async def long_running(ctx: ProbeContext, params: LongParams) -> LongRunning:
    shown = values_shown(ctx, "postgres")
    rows, [unjudged] = await run_queries(
        ctx, params, (LONG_RUNNING, (params.min_duration_s, params.limit + 1)), (UNJUDGED, ())
    )
    consequence = (
        f"{unjudged['n']} client sessions of other users could not be judged and are not listed, "
        "however long they have run."
    )
    return LongRunning(
        min_duration_s=params.min_duration_s,
        queries=[session(row, shown) for row in rows[: params.limit]],
        truncated=len(rows) > params.limit,
        unjudged_sessions=unjudged["n"],
        sees_all_sessions=unjudged["sees_all"],
        visibility=visibility_note(unjudged["sees_all"], consequence),
    )

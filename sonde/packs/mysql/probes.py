"""MySQL/MariaDB databases with their sizes, and the process list.

Without the PROCESS privilege the process list holds the login's own user's
threads only; information_schema lists only the databases and tables the login
holds a privilege on. What it holds, its own or through a role, is read from
``SHOW GRANTS`` (`sonde.packs.mysql.visibility`), never tried: lacking it, each
answer says what it could not see (about how many connections, or whether the
number of databases can be known at all).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.mysql import PACK
from sonde.packs.mysql.connection import (
    SONDE_THREAD,
    MysqlParams,
    Session,
    as_dict,
    one_turn,
    run_queries,
    session,
)
from sonde.packs.mysql.visibility import SHOW_GRANTS, databases_visibility, global_privileges
from sonde.packs.query_values import shown_query, values_shown

QUERY_MAX_CHARS = 1000
DATABASES = """
SELECT s.SCHEMA_NAME AS name,
       CAST(COALESCE(SUM(t.DATA_LENGTH + t.INDEX_LENGTH), 0) AS UNSIGNED) AS size_bytes,
       CAST(COALESCE(SUM(t.DATA_FREE), 0) AS UNSIGNED) AS free_bytes,
       COUNT(t.TABLE_NAME) AS tables
FROM information_schema.SCHEMATA s
LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME
WHERE %s OR s.SCHEMA_NAME NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
GROUP BY s.SCHEMA_NAME ORDER BY size_bytes DESC, name"""
LISTED = "ID <> CONNECTION_ID() AND (%s OR COMMAND <> 'Sleep') AND TIME >= %s"
# InnoDB's transactions (information_schema.INNODB_TRX, PROCESS only): a thread's open one, its age
TRANSACTIONS = "LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID"
TRANSACTION_S = "TIMESTAMPDIFF(SECOND, x.trx_started, NOW())"
# the longer of its state's time and its transaction's age: an idle thread holding a transaction open counts
RUNNING_S = f"GREATEST(p.TIME, COALESCE({TRANSACTION_S}, 0))"
THREAD_COLUMNS = f"""p.ID AS id, p.USER AS user, p.HOST AS host, p.DB AS db, p.COMMAND AS command,
       p.TIME AS time_s, p.STATE AS state, LEFT(p.INFO, {QUERY_MAX_CHARS}) AS query"""
WITH_TRANSACTION = f"x.trx_state AS transaction_state, {TRANSACTION_S} AS transaction_s"
WITHOUT_TRANSACTION = "NULL AS transaction_state, NULL AS transaction_s"


def processes_query(sees_transactions: bool) -> str:
    """The process list, with each thread's open InnoDB transaction where this login may read them.

    Idle threads holding a transaction open are listed with or without include_sleeping.
    """
    if not sees_transactions:
        return f"""
SELECT {THREAD_COLUMNS}, {WITHOUT_TRANSACTION} FROM information_schema.PROCESSLIST p
WHERE {LISTED} AND NOT {SONDE_THREAD}
ORDER BY TIME DESC, ID LIMIT %s"""
    return f"""
SELECT {THREAD_COLUMNS}, {WITH_TRANSACTION} FROM information_schema.PROCESSLIST p {TRANSACTIONS}
WHERE ID <> CONNECTION_ID() AND (%s OR COMMAND <> 'Sleep' OR x.trx_id IS NOT NULL) AND {RUNNING_S} >= %s
  AND NOT {SONDE_THREAD}
ORDER BY {RUNNING_S} DESC, ID LIMIT %s"""


SONDE_THREADS = f"SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE {LISTED} AND {SONDE_THREAD}"
VISIBLE_THREADS = "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST"
THREADS_CONNECTED = "SHOW GLOBAL STATUS LIKE 'Threads_connected'"


class DatabasesParams(MysqlParams):
    include_system: bool = Field(
        default=False, strict=True, description="Include mysql, sys and the schemas."
    )
    limit: int = Field(default=100, ge=1, le=1000, strict=True, description="At most this many databases.")


class Database(Result):
    name: str
    size_bytes: int
    free_bytes: int
    tables: int


class Databases(Result):
    databases: list[Database]
    total: int
    total_size_bytes: int
    truncated: bool
    sees_all_databases: bool
    hidden_databases: int | None
    visibility: str | None


def databases_listing(rows: list[dict[str, Any]], limit: int, grants: list[dict[str, Any]]) -> Databases:
    """Totals over every row of ``rows``; the first ``limit`` rows listed; what `SHOW_GRANTS` ``grants`` hide."""
    hidden, visibility = databases_visibility(global_privileges(grants))
    return Databases(
        databases=[Database(**row) for row in rows[:limit]],
        total=len(rows),
        total_size_bytes=sum(int(row["size_bytes"]) for row in rows),
        truncated=len(rows) > limit,
        sees_all_databases=visibility is None,
        hidden_databases=hidden,
        visibility=visibility,
    )


@PACK.probe(
    "mysql.databases.sizes",
    """MySQL/MariaDB databases, largest first: data plus index size in bytes, reclaimable
    free bytes and table count, from information_schema: for InnoDB tables these sizes are
    InnoDB's estimates from its table statistics, which can lag behind recent writes (until
    InnoDB recalculates them in the background or ANALYZE TABLE runs; MySQL 8 also caches
    them for information_schema_stats_expiry, a day by default). With the number of databases
    and their total size, both over every database included (system schemas only with
    include_system), not just the `limit` listed. information_schema shows a login only
    the databases and tables it holds a privilege on: unless it holds one on every table
    (SHOW VIEW ON *.* is enough), `sees_all_databases` is false, `visibility` says what is
    missing, and `hidden_databases` is how many databases are not listed: 0 with SHOW
    DATABASES (every name listed, but the tables of the others read 0), null when that
    cannot be known. Use it for 'what fills the disk' on a database server.""",
    timeout_s=20,
)
@one_turn
async def databases_sizes(ctx: ProbeContext, params: DatabasesParams) -> Databases:
    rows, grants = await run_queries(ctx, params, (DATABASES, (params.include_system,)), (SHOW_GRANTS, ()))
    return databases_listing(rows, params.limit, grants)


class ProcessParams(MysqlParams):
    include_sleeping: bool = Field(
        default=False, strict=True, description="Include idle ('Sleep') connections."
    )
    min_time_s: int = Field(
        default=0, ge=0, le=86_400, strict=True, description="In its state at least this long."
    )
    limit: int = Field(default=50, ge=1, le=500, strict=True, description="At most this many threads.")


class Thread(Result):
    id: int
    user: str | None
    host: str | None
    db: str | None
    command: str | None
    time_s: int | None
    state: str | None
    query: str | None
    transaction_state: str | None = None
    transaction_s: int | None = None


class ProcessList(Result):
    threads: list[Thread]
    truncated: bool
    sonde_threads: int
    sees_all_threads: bool
    hidden_threads: int | None
    visibility: str | None


def _seconds(value: Any) -> int | None:
    return int(value) if value is not None else None


def thread(row: dict[str, Any], shown: bool) -> Thread:
    """A thread's row; its statement's values as ``?`` unless ``shown`` (`sonde.packs.query_values`)."""
    seconds = {name: _seconds(row.get(name)) for name in ("time_s", "transaction_s")}
    return Thread(**{**row, **seconds, "query": shown_query(row.get("query"), "mysql", shown)})


def hidden_threads_note(hidden: int) -> str:
    return (
        "This login lacks the PROCESS privilege: it sees its own user's threads only, and about "
        f"{hidden} other connections (Threads_connected less the threads it sees) are hidden; nor may it "
        "read InnoDB's transactions, so no thread shows an open transaction (transaction_s is null) and "
        "idle ones holding a transaction open are not told apart. Grant the agent's database user PROCESS "
        "to see them."
    )


@PACK.probe(
    "mysql.processes.list",
    """MySQL/MariaDB threads (the process list), longest-running first: ID, user, client
    host, database, command, seconds in the current state, state and the statement (cut to
    1000 characters; its values, string and number literals, as '?' unless
    packs.mysql.show_values is true in the agent config), and a thread's open InnoDB
    transaction: its state (RUNNING, or LOCK WAIT for one waiting on a row lock: see
    mysql.locks.waits) and age in seconds
    (transaction_s), counted in min_time_s and the order. Idle ('Sleep') connections are
    left out unless include_sleeping, except those holding a transaction open (they may
    hold locks others wait for): those are always listed. Sonde's own
    connections (its probes running beside this one) are left out and counted in
    `sonde_threads`: while they run a statement, and idle too where performance_schema is
    on. Other users' threads need the PROCESS privilege: without it `sees_all_threads` is
    false, `hidden_threads` says about how many connections are not seen, and `visibility`
    says so: it cannot read the transactions either (transaction_s null).""",
    timeout_s=15,
)
@one_turn
async def processes_list(ctx: ProbeContext, params: ProcessParams) -> ProcessList:
    listed = (params.include_sleeping, params.min_time_s)
    shown = values_shown(ctx, "mysql")
    async with session(ctx, params) as connection:
        [grants] = await connection.run((SHOW_GRANTS, ()))
        # InnoDB's transactions are PROCESS's too: not asked for without it (a refusal is counted)
        sees_all = global_privileges(grants).sees_all_threads
        rows, [sonde] = await connection.run(
            (processes_query(sees_all), (*listed, params.limit + 1)), (SONDE_THREADS, listed)
        )
        hidden = None if sees_all else await hidden_thread_count(connection)
    return ProcessList(
        threads=[thread(row, shown) for row in rows[: params.limit]],
        truncated=len(rows) > params.limit,
        sonde_threads=sonde["n"],
        sees_all_threads=sees_all,
        hidden_threads=hidden,
        visibility=None if hidden is None else hidden_threads_note(hidden),
    )


async def hidden_thread_count(connection: Session) -> int:
    """About how many connections a login without PROCESS does not see (two readings, one after the other)."""
    [[visible], connected] = await connection.run((VISIBLE_THREADS, ()), (THREADS_CONNECTED, ()))
    return max(int(as_dict(connected).get("threads_connected", "0")) - int(visible["n"]), 0)

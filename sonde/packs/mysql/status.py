"""Global status of MySQL/MariaDB: QPS, connection usage, slow queries, and the InnoDB summary.

``SHOW GLOBAL STATUS`` counters are cumulative since start. QPS is measured
over a short sample (`interval_s`): the counters are read twice with a
`trio.sleep` in between (no thread sleeps), and the difference divided by the
time that passed. Both readings go over one connection, whose own statements in
between (its ``Questions`` as a session counter) are taken off, so an idle
server reads 0 queries per second. Sonde's sibling probes' statements (a runbook
runs its probes at once) are not: the server keeps ``Questions`` per connection
only in performance_schema (off on MariaDB by default), so they read as a few
queries per second, and the description says so.

Slow queries are rare events, so they are not scaled into a rate over the
sample: one slow query finishing inside a 1 s sample is not "60 per minute".
The summary gives the count that finished during the sample (with its length)
and the rate since start (``Slow_queries`` / ``Uptime``, per minute).

``Threads_connected`` and ``Threads_running`` describe the clients' load, so
Sonde's own connections are taken off both, as `mysql.processes.list` leaves them
out and the postgres pack leaves out its sessions: the probe's own (so an idle
server reads 0 connections, not 1), and its siblings (a runbook runs its probes at
once), counted in ``sonde_threads``. The process list tells a sibling apart while
it runs a statement (marked), or idle too where performance_schema is on (off by
default on MariaDB); siblings are of the probe's own account, so a login without
PROCESS sees them too. They are counted in the statement right after each
``SHOW GLOBAL STATUS``: two readings, a moment apart, not one.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio
from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.mysql import PACK
from sonde.packs.mysql.connection import (
    SONDE_THREAD,
    MysqlParams,
    as_dict,
    as_number,
    one_turn,
    run_queries,
    session,
)

STATUS = "SHOW GLOBAL STATUS"
VARIABLES = (
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
    "('max_connections', 'long_query_time', 'slow_query_log', 'version', 'version_comment', "
    "'innodb_buffer_pool_size')"
)
OWN_CONNECTIONS = 1  # the probe's connection, counted in the Threads_connected (and _running) it reads
# Sonde's other connections now, and of them those running a statement (as Threads_running counts them);
# run without args, so SONDE_THREAD's '%%' stays two wildcards: the same match as one
SONDE_SIBLINGS = f"""
SELECT COUNT(*) AS connected, CAST(COALESCE(SUM(COMMAND <> 'Sleep'), 0) AS UNSIGNED) AS running
FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND {SONDE_THREAD}"""
# This connection's statements so far, this one included (as SHOW GLOBAL STATUS counts itself)
SESSION_QUESTIONS = "SHOW SESSION STATUS LIKE 'Questions'"


class StatusParams(MysqlParams):
    interval_s: float = Field(
        default=1.0,
        ge=0,
        le=10,
        strict=True,
        description="Sample QPS and count slow queries over this long (0: QPS since start, no count).",
    )


class StatusSummary(Result):
    version: str
    uptime_s: int
    threads_connected: int
    threads_running: int
    sonde_threads: int
    max_connections: int
    connection_usage_percent: float
    max_used_connections: int
    aborted_connects: int
    refused_max_connections: int | None
    queries_per_second: float = Field(
        description="Statements per second over the sample, this probe's own left out; Sonde's other "
        "probes running at once (a runbook's) are counted as any client's: a few per second."
    )
    qps_since_start: float
    slow_queries_total: int
    slow_queries_in_sample: int | None
    slow_queries_per_minute_since_start: float
    long_query_time_s: float | None
    slow_query_log: bool
    sample_s: float


def _int(status: Mapping[str, str], name: str) -> int:
    value = as_number(status.get(name))
    return int(value) if value is not None else 0


def summarize_status(
    before: Mapping[str, str],
    after: Mapping[str, str],
    variables: Mapping[str, str],
    elapsed_s: float,
    own_questions: int = 0,
    siblings: Mapping[str, int] | None = None,
) -> StatusSummary:
    """The summary from two ``SHOW GLOBAL STATUS`` readings ``elapsed_s`` apart (the same one twice for 0).

    Each reading is taken over the probe's own connection, which is left out of the
    connected and running threads and so of the percent used, as are ``siblings``
    (`SONDE_SIBLINGS` beside the second reading: ``connected``, ``running``);
    ``own_questions`` is how many of the statements between the readings were the probe's own.
    """
    sonde = {"connected": 0, "running": 0, **(siblings or {})}
    uptime = max(_int(after, "uptime"), 1)
    max_connections = _int(variables, "max_connections") or 1
    connected = max(_int(after, "threads_connected") - OWN_CONNECTIONS - int(sonde["connected"]), 0)
    running = max(_int(after, "threads_running") - OWN_CONNECTIONS - int(sonde["running"]), 0)
    slow_delta = max(_int(after, "slow_queries") - _int(before, "slow_queries"), 0)
    questions_delta = max(_int(after, "questions") - _int(before, "questions") - own_questions, 0)
    refused = as_number(after.get("connection_errors_max_connections"))
    return StatusSummary(
        version=" ".join(filter(None, (variables.get("version"), variables.get("version_comment")))),
        uptime_s=uptime,
        threads_connected=connected,
        threads_running=running,
        sonde_threads=int(sonde["connected"]),
        max_connections=max_connections,
        connection_usage_percent=round(connected * 100 / max_connections, 1),
        max_used_connections=_int(after, "max_used_connections"),
        aborted_connects=_int(after, "aborted_connects"),
        refused_max_connections=int(refused) if refused is not None else None,
        queries_per_second=round(questions_delta / elapsed_s, 2)
        if elapsed_s > 0
        else round(_int(after, "questions") / uptime, 2),
        qps_since_start=round(_int(after, "questions") / uptime, 2),
        slow_queries_total=_int(after, "slow_queries"),
        slow_queries_in_sample=slow_delta if elapsed_s > 0 else None,
        slow_queries_per_minute_since_start=round(_int(after, "slow_queries") * 60 / uptime, 2),
        long_query_time_s=as_number(variables.get("long_query_time")),
        slow_query_log=variables.get("slow_query_log", "").upper() in {"ON", "1"},
        sample_s=round(elapsed_s, 3),
    )


@PACK.probe(
    "mysql.status.summary",
    """MySQL/MariaDB global status: version, uptime, connected and running threads against
    max_connections (percent used), highest use since start, aborted and refused
    connections, queries per second over an `interval_s` sample and since start, slow
    queries (total since start, the average per minute since start, and how many finished
    during the sample of `sample_s` seconds: a count, never scaled up to a rate; null when
    interval_s is 0), long_query_time and whether the slow query log is on. Sonde's own
    connections are left out of the connected and running threads and the percent used
    (the highest use since start is the server's own count): the probe's, and its siblings'
    running beside it, which are counted in `sonde_threads` (told apart while they run a
    statement, and idle too where performance_schema is on). The probe's own statements
    are left out of the queries per second, but not those of Sonde's other probes running
    beside it (a runbook, as diagnose and health_check run it, runs its probes at once):
    the server counts statements per connection only, so on an idle server this reads a
    few per second then.
    Use it for 'is the database overloaded' or 'too many connections'.""",
    timeout_s=25,
)
@one_turn
async def status_summary(ctx: ProbeContext, params: StatusParams) -> StatusSummary:
    async with session(ctx, params) as connection:
        before_rows, [siblings], session_before, variables = await connection.run(
            (STATUS, ()), (SONDE_SIBLINGS, ()), (SESSION_QUESTIONS, ()), (VARIABLES, ())
        )
        started = trio.current_time()
        own = 0
        if params.interval_s > 0:
            await trio.sleep(params.interval_s)
            after_rows, [siblings], session_after = await connection.run(
                (STATUS, ()), (SONDE_SIBLINGS, ()), (SESSION_QUESTIONS, ())
            )
            # this connection's statements after the first reading, through the second
            own = _int(as_dict(session_after), "questions") - _int(as_dict(session_before), "questions")
        else:
            after_rows = before_rows
        elapsed = trio.current_time() - started if params.interval_s > 0 else 0.0
    return summarize_status(
        as_dict(before_rows), as_dict(after_rows), as_dict(variables), elapsed, own, siblings
    )


class InnodbSummary(Result):
    buffer_pool_size_bytes: int | None
    buffer_pool_hit_percent: float | None
    read_requests: int
    disk_reads: int
    pages_total: int
    pages_free: int
    pages_dirty: int
    row_lock_waits: int
    row_lock_current_waits: int
    row_lock_time_avg_ms: float | None
    deadlocks: int | None
    deadlocks_per_hour_since_start: float | None
    uptime_s: int


def summarize_innodb(status: Mapping[str, str], variables: Mapping[str, str]) -> InnodbSummary:
    requests = _int(status, "innodb_buffer_pool_read_requests")
    reads = _int(status, "innodb_buffer_pool_reads")
    size = as_number(variables.get("innodb_buffer_pool_size"))
    deadlocks = as_number(status.get("innodb_deadlocks"))
    uptime = max(_int(status, "uptime"), 1)
    return InnodbSummary(
        buffer_pool_size_bytes=int(size) if size is not None else None,
        buffer_pool_hit_percent=round((1 - reads / requests) * 100, 2) if requests else None,
        read_requests=requests,
        disk_reads=reads,
        pages_total=_int(status, "innodb_buffer_pool_pages_total"),
        pages_free=_int(status, "innodb_buffer_pool_pages_free"),
        pages_dirty=_int(status, "innodb_buffer_pool_pages_dirty"),
        row_lock_waits=_int(status, "innodb_row_lock_waits"),
        row_lock_current_waits=_int(status, "innodb_row_lock_current_waits"),
        row_lock_time_avg_ms=as_number(status.get("innodb_row_lock_time_avg")),
        deadlocks=int(deadlocks) if deadlocks is not None else None,
        deadlocks_per_hour_since_start=round(deadlocks * 3600 / uptime, 2) if deadlocks is not None else None,
        uptime_s=uptime,
    )


@PACK.probe(
    "mysql.innodb.summary",
    """InnoDB since start: buffer pool size, hit ratio (read requests served without a disk
    read, percent), pages total/free/dirty, row lock waits (total and now), average row
    lock wait in ms, and deadlocks where the server counts them (MariaDB; null on MySQL),
    in all and per hour since the server started `uptime_s` seconds ago. Use it for slow
    queries caused by I/O or lock contention; mysql.locks.waits names who blocks whom now.""",
    timeout_s=15,
)
@one_turn
async def innodb_summary(ctx: ProbeContext, params: MysqlParams) -> InnodbSummary:
    status, variables = await run_queries(ctx, params, (STATUS, ()), (VARIABLES, ()))
    return summarize_innodb(as_dict(status), as_dict(variables))

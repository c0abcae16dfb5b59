"""The `postgres.locks.blocked` probe: sessions waiting on locks, who blocks them, and lock counts.

``pg_blocking_pids`` names who blocks whom, from ``pg_locks``, which hides nothing from
any login; what those sessions are doing comes from ``pg_stat_activity``, where a login
without pg_monitor sees little of other users' sessions (`sonde.packs.postgres.visibility`).
A blocking PID 0 is a prepared transaction, read from ``pg_prepared_xacts``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.postgres import PACK
from sonde.packs.postgres.activity import SESSION_COLUMNS, Session, seconds_since, session
from sonde.packs.postgres.connection import SONDE_APPLICATION, PostgresParams, one_turn, run_queries
from sonde.packs.postgres.visibility import DETAILS_HIDDEN, SEES_ALL, visibility_note
from sonde.packs.query_values import values_shown

# every blocked session is found (pg_blocking_pids reads pg_locks, which hides nothing), even those whose
# details this login may not see (hidden: their start times read NULL, so they come last). Each call
# takes the lock manager's locks for a moment, on a server that may be lock-bound already: it is made
# once for each session waiting on a lock (pg_locks' ungranted rows; OFFSET 0 keeps it in the
# subquery), not twice for every session
# how long a blocked session has waited: since its state last changed (to active, when its statement
# began), or its statement began, the later of the two; NULL where this login may not see them
WAITING_S = "extract(epoch FROM now() - greatest(state_change, query_start))::float8"
BLOCKED = f"""
SELECT {SESSION_COLUMNS}, {WAITING_S} AS waiting_s, blocking_pids, {DETAILS_HIDDEN} AS hidden FROM (
  SELECT *, pg_blocking_pids(pid) AS blocking_pids FROM pg_stat_activity
  WHERE pid IN (SELECT pid FROM pg_locks WHERE NOT granted) OFFSET 0) waiting
WHERE cardinality(blocking_pids) > 0 ORDER BY query_start LIMIT %s"""
BLOCKERS = f"SELECT {SESSION_COLUMNS}, {DETAILS_HIDDEN} AS hidden FROM pg_stat_activity WHERE pid = ANY(%s)"
# pg_blocking_pids() names a prepared transaction, which has no session, as PID 0: these are read
# instead, each marked when it holds a lock on what one of the listed blocked sessions waits for
# (a prepared transaction's locks have no pid; its own transaction ID lock tells which are its)
PREPARED = """
SELECT p.gid, p.owner, p.database, p.prepared::text AS prepared_at,
       extract(epoch FROM now() - p.prepared)::float8 AS age_s,
       EXISTS (
         SELECT 1 FROM pg_locks mine JOIN pg_locks held ON held.virtualtransaction = mine.virtualtransaction
         JOIN pg_locks w ON (w.locktype, w.database, w.relation, w.page, w.tuple, w.virtualxid,
                             w.transactionid, w.classid, w.objid, w.objsubid)
                            IS NOT DISTINCT FROM (held.locktype, held.database, held.relation, held.page,
                             held.tuple, held.virtualxid, held.transactionid, held.classid, held.objid,
                             held.objsubid)
         WHERE mine.pid IS NULL AND mine.locktype = 'transactionid' AND mine.transactionid = p.transaction
           AND held.pid IS NULL AND held.granted AND NOT w.granted AND w.pid = ANY(%s)
       ) AS blocking
FROM pg_prepared_xacts p ORDER BY blocking DESC, p.prepared LIMIT %s"""
PREPARED_LISTED = 20
PREPARED_PID = 0  # pg_blocking_pids()'s name for a prepared transaction
# locks of prepared transactions (no session) are counted; Sonde's sessions' own are not
LOCK_COUNTS = f"""
SELECT l.mode, l.granted, count(*) AS n FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE a.application_name IS DISTINCT FROM '{SONDE_APPLICATION}' GROUP BY 1, 2 ORDER BY 1, 2"""


class BlockedSession(Session):
    waiting_s: float | None  # since its statement began: it has waited on the lock at most this long
    blocking_pids: list[int]


class LockParams(PostgresParams):
    limit: int = Field(
        default=50, ge=1, le=500, strict=True, description="At most this many blocked sessions."
    )


class LockCount(Result):
    mode: str
    granted: bool
    count: int


class PreparedTransaction(Result):
    gid: str
    owner: str
    database: str
    prepared_at: str
    age_s: float
    blocking: bool


class Locks(Result):
    blocked: list[BlockedSession]
    blockers: list[Session]
    prepared_transactions: list[PreparedTransaction]
    lock_counts: list[LockCount]
    truncated: bool
    sees_all_sessions: bool
    hidden_sessions: int
    visibility: str | None


def locks_listing(
    blocked: list[dict[str, Any]],
    blockers: list[dict[str, Any]],
    counts: list[dict[str, Any]],
    limit: int,
    sees_all: bool,
    prepared: list[dict[str, Any]],
    shown: bool,
) -> Locks:
    """The first ``limit`` `BLOCKED` rows, their `BLOCKERS` rows, the `PREPARED` transactions (when one
    blocks: PID 0) and the `LOCK_COUNTS`, with what is hidden."""
    listed = blocked[:limit]
    hidden = len({row["pid"] for row in [*listed, *blockers] if row["hidden"]})
    consequence = (
        f"{hidden} of the sessions listed, blocked or blocking, are other users': their state, wait, client "
        "and times read null, and their query '<insufficient privilege>'. Blocked sessions and their "
        "blockers are found all the same, and the lock counts are complete (pg_locks hides nothing)."
    )
    return Locks(
        blocked=[
            BlockedSession(
                **session(row, shown).model_dump(),
                waiting_s=seconds_since(row["waiting_s"]),
                blocking_pids=row["blocking_pids"],
            )
            for row in listed
        ],
        blockers=[session(row, shown) for row in blockers],
        prepared_transactions=[
            PreparedTransaction(**{**row, "age_s": seconds_since(row["age_s"])}) for row in prepared
        ],
        lock_counts=[LockCount(mode=row["mode"], granted=row["granted"], count=row["n"]) for row in counts],
        truncated=len(blocked) > limit,
        sees_all_sessions=sees_all,
        hidden_sessions=hidden,
        visibility=visibility_note(sees_all, consequence),
    )


@PACK.probe(
    "postgres.locks.blocked",
    """Sessions waiting on a lock held by another, each with how long it has waited
    (`waiting_s`, seconds since its statement began, pg_stat_activity's state_change: the
    wait began then or a little later), the PIDs blocking it
    (pg_blocking_pids) and what those blockers are doing (often 'idle in transaction', with
    `idle_s` since their last statement); a blocking PID 0 is a prepared transaction (no
    session holds it): then `prepared_transactions` lists those of pg_prepared_xacts (gid,
    owner, database, when prepared, `blocking` true for one holding a lock a listed session
    waits for), which COMMIT PREPARED or ROLLBACK PREPARED end;
    plus lock counts by mode, granted or waiting, leaving out the locks of Sonde's own
    sessions (application 'sonde': this probe's and its siblings'). A login without
    pg_monitor still finds every blocked session and its blockers, and counts every lock,
    but of other users' sessions sees only the PID, user, database and application: state,
    wait, client and times read null and the query '<insufficient privilege>';
    `sees_all_sessions` is then false, `hidden_sessions` counts those listed and
    `visibility` says so. Queries read with their values (string and number literals) as
    '?' unless packs.postgres.show_values is true in the agent config. Use it for 'queries
    hang' or 'deadlock'.""",
    timeout_s=15,
)
@one_turn
async def locks_blocked(ctx: ProbeContext, params: LockParams) -> Locks:
    blocked, counts, [sees] = await run_queries(
        ctx, params, (BLOCKED, (params.limit + 1,)), (LOCK_COUNTS, ()), (SEES_ALL, ())
    )
    listed = blocked[: params.limit]
    blocker_pids = sorted({pid for row in listed for pid in row["blocking_pids"]} - {PREPARED_PID})
    [blockers] = await run_queries(ctx, params, (BLOCKERS, (blocker_pids,))) if blocker_pids else [[]]
    by_prepared = any(PREPARED_PID in row["blocking_pids"] for row in listed)
    prepared_args = ([row["pid"] for row in listed], PREPARED_LISTED)
    [prepared] = await run_queries(ctx, params, (PREPARED, prepared_args)) if by_prepared else [[]]
    return locks_listing(
        blocked, blockers, counts, params.limit, sees["sees_all"], prepared, values_shown(ctx, "postgres")
    )

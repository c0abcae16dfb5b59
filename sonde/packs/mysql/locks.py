"""Who waits on whom in MySQL/MariaDB: InnoDB row lock waits and metadata (table) lock waits.

Row lock waits pair InnoDB's waiting and blocking transactions: MariaDB (and MySQL
5.7) in ``information_schema.INNODB_LOCK_WAITS``, MySQL 8 in
``performance_schema.data_lock_waits``; both read ``information_schema.INNODB_TRX``,
which needs the PROCESS privilege, as does seeing other users' threads.

A thread waiting on a metadata lock (``LOCK TABLES``, an ``ALTER`` or an open
transaction on the table) is told by its process list state ('Waiting for table
metadata lock' and its kin). Who holds that lock is only in
``performance_schema.metadata_locks``: on with MySQL 8; off on MariaDB by default
(``performance_schema=ON`` and the ``wait/lock/metadata/sql/mdl`` instrument). Where
it cannot be read the holders are null and the answer says why.

Each thread named, waiting or holding, is described from one reading of the process
list joined with its InnoDB transaction (`sonde.packs.mysql.probes.Thread`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sonde.packs.base import Result
from sonde.packs.context import ProbeContext
from sonde.packs.mysql import PACK
from sonde.packs.mysql.connection import SONDE_THREAD, MysqlParams, Session, as_dict, one_turn, session
from sonde.packs.mysql.probes import (
    THREAD_COLUMNS,
    TRANSACTIONS,
    WITH_TRANSACTION,
    WITHOUT_TRANSACTION,
    Thread,
    thread,
)
from sonde.packs.mysql.visibility import SHOW_GRANTS, GlobalPrivileges, global_privileges
from sonde.packs.query_values import values_shown

SERVER = "SELECT VERSION() AS version, @@performance_schema AS performance_schema"
CURRENT_WAITS = "SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_current_waits'"
# the waiting and the blocking thread of each row lock wait, with the lock asked for
ROW_WAIT_COLUMNS = """r.trx_mysql_thread_id AS waiting_id, b.trx_mysql_thread_id AS blocking_id,
       TIMESTAMPDIFF(SECOND, r.trx_wait_started, NOW()) AS wait_s"""
ROW_WAITS_MARIADB = f"""
SELECT {ROW_WAIT_COLUMNS}, l.lock_table AS lock_table, l.lock_mode AS lock_mode
FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
LEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id
ORDER BY wait_s DESC LIMIT %s"""
ROW_WAITS_MYSQL8 = f"""
SELECT {ROW_WAIT_COLUMNS}, CONCAT_WS('.', l.OBJECT_SCHEMA, l.OBJECT_NAME) AS lock_table,
       l.LOCK_MODE AS lock_mode
FROM performance_schema.data_lock_waits w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID
LEFT JOIN performance_schema.data_locks l ON l.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID
ORDER BY wait_s DESC LIMIT %s"""
# threads waiting on a lock the server (not InnoDB) keeps: metadata, table, global read, backup locks
LOCK_STATE = "Waiting for %%lock"
METADATA_WAITERS = f"""
SELECT ID AS id FROM information_schema.PROCESSLIST
WHERE ID <> CONNECTION_ID() AND STATE LIKE '{LOCK_STATE}' AND NOT {SONDE_THREAD}
ORDER BY TIME DESC, ID LIMIT %s"""
# each pending metadata lock's object, and the threads holding a lock granted on that object
METADATA_HOLDERS = """
SELECT wt.PROCESSLIST_ID AS waiting_id, w.OBJECT_TYPE AS object_type,
       CONCAT_WS('.', w.OBJECT_SCHEMA, w.OBJECT_NAME) AS object, ht.PROCESSLIST_ID AS holding_id,
       g.LOCK_TYPE AS lock_type
FROM performance_schema.metadata_locks w
JOIN performance_schema.threads wt ON wt.THREAD_ID = w.OWNER_THREAD_ID
LEFT JOIN performance_schema.metadata_locks g ON g.OBJECT_TYPE = w.OBJECT_TYPE
  AND g.OBJECT_SCHEMA <=> w.OBJECT_SCHEMA AND g.OBJECT_NAME <=> w.OBJECT_NAME
  AND g.LOCK_STATUS = 'GRANTED' AND g.OWNER_THREAD_ID <> w.OWNER_THREAD_ID
LEFT JOIN performance_schema.threads ht ON ht.THREAD_ID = g.OWNER_THREAD_ID
WHERE w.LOCK_STATUS = 'PENDING' AND wt.PROCESSLIST_ID IN ({ids})"""
THREADS = "SELECT {columns} FROM information_schema.PROCESSLIST p {join} WHERE p.ID IN ({ids})"
HIDDEN_WAITS = (
    "This login lacks the PROCESS privilege: InnoDB's transactions (information_schema.INNODB_TRX) are "
    "refused it, so row lock waits cannot be listed (row_lock_current_waits still counts them), and it "
    "sees its own user's threads only, so metadata lock waits are listed among those only. Grant the "
    "agent's database user PROCESS."
)
PERFORMANCE_SCHEMA_OFF = (
    "performance_schema is off on this server (MariaDB's default): who holds a metadata lock cannot be "
    "told. Look for a thread with an open transaction on the table or one that ran LOCK TABLES "
    "(mysql.processes.list include_sleeping=true lists idle threads holding a transaction open)."
)
ROW_WAITS_DENIED = (
    "This login may not read performance_schema, where MySQL 8 keeps row lock waits (data_lock_waits): "
    "they are not listed (row_lock_current_waits still counts them). Grant the agent's database user "
    "SELECT ON performance_schema.*."
)
PERFORMANCE_SCHEMA_DENIED = (
    "This login may not read performance_schema, where who holds a metadata lock is kept: grant the "
    "agent's database user SELECT ON performance_schema.* to see the holders."
)
NOT_INSTRUMENTED = (
    "performance_schema recorded no metadata lock for some waits (holders null): its instrument "
    "wait/lock/metadata/sql/mdl is off (MariaDB's default), or the lock was let go meanwhile."
)


class LockParams(MysqlParams):
    limit: int = Field(
        default=50, ge=1, le=500, strict=True, description="At most this many waits of each kind."
    )


class RowLockWait(Result):
    waiting: Thread | None
    blocking: Thread | None
    wait_s: int | None
    lock_table: str | None
    lock_mode: str | None


class MetadataLockWait(Result):
    waiting: Thread
    object: str | None
    holders: list[Thread] | None


class LockWaits(Result):
    row_lock_waits: list[RowLockWait]
    metadata_lock_waits: list[MetadataLockWait]
    row_lock_current_waits: int
    truncated: bool
    sees_all_threads: bool
    knows_metadata_lock_holders: bool
    visibility: str | None


def row_waits_query(version: str, privileges: GlobalPrivileges) -> str | None:
    """MariaDB and MySQL 5.x keep row lock waits in information_schema; MySQL 8 in performance_schema.

    None when the login may not read them (so is not refused, which the server would count).
    """
    if not privileges.sees_all_threads:
        return None
    if "MariaDB" in version or version.startswith("5."):
        return ROW_WAITS_MARIADB
    return ROW_WAITS_MYSQL8 if privileges.reads_performance_schema else None


def _ids(ids: set[int]) -> str:
    return ", ".join(str(int(i)) for i in sorted(ids)) or "NULL"


async def _threads(connection: Session, ids: set[int], sees_all: bool, shown: bool) -> dict[int, Thread]:
    """The named threads, with their open InnoDB transaction where the login may read them."""
    columns = f"{THREAD_COLUMNS}, {WITH_TRANSACTION if sees_all else WITHOUT_TRANSACTION}"
    sql = THREADS.format(columns=columns, join=TRANSACTIONS if sees_all else "", ids=_ids(ids))
    [rows] = await connection.run((sql, ()))
    return {int(row["id"]): thread(row, shown) for row in rows}


def metadata_holders_note(privileges: GlobalPrivileges, performance_schema: bool) -> str | None:
    """Why the holders of metadata locks cannot be read (None: they can)."""
    if not performance_schema:
        return PERFORMANCE_SCHEMA_OFF
    return None if privileges.reads_performance_schema else PERFORMANCE_SCHEMA_DENIED


@dataclass(frozen=True)
class Readings:
    """What one probe run read, for `lock_waits` to put together."""

    row_waits: list[dict[str, Any]]
    metadata_waiters: list[dict[str, Any]]
    metadata_holders: list[dict[str, Any]]
    threads: dict[int, Thread]
    current_waits: int
    truncated: bool


def metadata_waits(read: Readings, holders_known: bool) -> list[MetadataLockWait]:
    """Each waiting thread (still there at the second reading), with the holders of a lock on its object."""
    waits = []
    for row in read.metadata_waiters:
        waiting = read.threads.get(int(row["id"]))
        if waiting is None:  # gone between the two readings
            continue
        pending = [h for h in read.metadata_holders if h["waiting_id"] == waiting.id]
        holder_ids = sorted({int(h["holding_id"]) for h in pending if h["holding_id"] is not None})
        waits.append(
            MetadataLockWait(
                waiting=waiting,
                object=next((h["object"] for h in pending), None),
                holders=[read.threads[i] for i in holder_ids if i in read.threads]
                if holders_known and pending
                else None,
            )
        )
    return waits


def lock_waits(
    read: Readings, holders_note: str | None, sees_all: bool, row_waits_note: str | None
) -> LockWaits:
    """The answer from the readings; the notes say why metadata lock holders, or row lock waits, are not known."""
    row_waits = [
        RowLockWait(
            waiting=read.threads.get(int(row["waiting_id"])),
            blocking=read.threads.get(int(row["blocking_id"])),
            wait_s=int(row["wait_s"]) if row["wait_s"] is not None else None,
            lock_table=str(row["lock_table"]).replace("`", "") if row["lock_table"] else None,
            lock_mode=row["lock_mode"],
        )
        for row in read.row_waits
    ]
    metadata = metadata_waits(read, holders_note is None)
    if holders_note is None and any(wait.holders is None for wait in metadata):
        holders_note = NOT_INSTRUMENTED
    shown = (None if sees_all else HIDDEN_WAITS, row_waits_note, holders_note if metadata else None)
    notes = [note for note in shown if note]
    return LockWaits(
        row_lock_waits=row_waits,
        metadata_lock_waits=metadata,
        row_lock_current_waits=read.current_waits,
        truncated=read.truncated,
        sees_all_threads=sees_all,
        knows_metadata_lock_holders=holders_note is None,
        visibility=" ".join(notes) or None,
    )


@PACK.probe(
    "mysql.locks.waits",
    """Who waits on whom, now: each InnoDB row lock wait with the waiting thread, the
    thread whose transaction holds the lock (id, user, client host, command, state, seconds
    in it, its transaction's state and age in transaction_s, and its current statement:
    often none, an idle thread holding a transaction open), the seconds waited, the table
    and lock mode; and each thread waiting on a metadata or table lock (state 'Waiting for
    table metadata lock', LOCK TABLES, global read lock), with the threads holding a lock on
    that object where performance_schema tells (MySQL 8; MariaDB only with
    performance_schema on): else `holders` is null, `knows_metadata_lock_holders` false and
    `visibility` says why. `row_lock_current_waits` is InnoDB's own count. Without the
    PROCESS privilege row lock waits cannot be listed and only the login's own user's
    threads are seen: `sees_all_threads` is false and `visibility` says so. Sonde's own
    connections are left out. Statements read with their values (string and number
    literals) as '?' unless packs.mysql.show_values is true in the agent config. Use it
    when queries hang or time out on locks.""",
    timeout_s=15,
)
@one_turn
async def locks_waits(ctx: ProbeContext, params: LockParams) -> LockWaits:
    async with session(ctx, params) as connection:
        grants, [server], current, waiters = await connection.run(
            (SHOW_GRANTS, ()), (SERVER, ()), (CURRENT_WAITS, ()), (METADATA_WAITERS, (params.limit + 1,))
        )
        privileges = global_privileges(grants)
        sees_all = privileges.sees_all_threads
        row_waits = row_waits_query(str(server["version"]), privileges)
        [rows] = await connection.run((row_waits, (params.limit + 1,))) if row_waits else [[]]
        waiting_ids = {int(row["id"]) for row in waiters[: params.limit]}
        not_told = metadata_holders_note(privileges, bool(server["performance_schema"]))
        holders = (
            await connection.run((METADATA_HOLDERS.format(ids=_ids(waiting_ids)), ()))
            if waiting_ids and not_told is None
            else [[]]
        )[0]
        named = waiting_ids | {int(row[key]) for row in rows for key in ("waiting_id", "blocking_id")}
        named |= {int(row["holding_id"]) for row in holders if row["holding_id"] is not None}
        threads = await _threads(connection, named, sees_all, values_shown(ctx, "mysql"))
    read = Readings(
        row_waits=rows[: params.limit],
        metadata_waiters=waiters[: params.limit],
        metadata_holders=holders,
        threads=threads,
        current_waits=int(as_dict(current).get("innodb_row_lock_current_waits", "0")),
        truncated=len(rows) > params.limit or len(waiters) > params.limit,
    )
    hidden = None if row_waits or not sees_all else ROW_WAITS_DENIED
    return lock_waits(read, not_told, sees_all, hidden)

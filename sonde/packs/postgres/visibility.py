"""Which rows of ``pg_stat_activity`` are client sessions, and what this login may see of them.

A login that is neither a superuser nor a member of ``pg_read_all_stats`` (which
``pg_monitor`` includes) sees every row's pid, database, user and application,
but of other users' sessions nothing more: ``backend_type``, ``state``, the
start times, the client and the query read NULL. Filtering on ``backend_type``
alone dropped those sessions, and the counts read low without saying so.

A hidden row is still told apart from a background process by what anyone may
read: the checkpointer, WAL writer, autovacuum and the like run as no user
(``usesysid`` NULL); background workers mostly have no database (the logical
replication launcher); walsenders are listed, pid only, by
``pg_stat_get_wal_senders()``. A hidden row with a user and a database that is
no walsender is counted as a client session. A background worker connected to
a database (a parallel or logical replication worker, an extension's) cannot be
told from one without pg_monitor: the answers say so.

``pg_locks`` and ``pg_blocking_pids()`` hide nothing from such a login: who holds
and waits on which lock is seen in full, only not what those sessions are doing.
"""

from __future__ import annotations

from sonde.packs.postgres.connection import SONDE_APPLICATION

DETAILS_HIDDEN = "backend_type IS NULL"  # set on every row this login may see in full
CLIENT_SESSIONS = f"""(backend_type = 'client backend' OR ({DETAILS_HIDDEN} AND usesysid IS NOT NULL
 AND datid IS NOT NULL AND pid NOT IN (SELECT pid FROM pg_stat_get_wal_senders())))"""
NOT_SONDE = f"application_name IS DISTINCT FROM '{SONDE_APPLICATION}'"
# true for superusers and members of pg_read_all_stats (pg_monitor is one): every session in full
SEES_ALL_SESSIONS = "pg_has_role('pg_read_all_stats', 'USAGE')"
SEES_ALL = f"SELECT {SEES_ALL_SESSIONS} AS sees_all"
HIDDEN_DETAILS = (
    "This login is not a superuser or member of pg_monitor (or pg_read_all_stats): of other users' "
    "sessions it sees the user, database and application only, not their state, query, client or "
    "start times."
)
MONITOR_GRANT = "Grant the agent's database user pg_monitor to see them."


def visibility_note(sees_all: bool, consequence: str) -> str | None:
    """What this login cannot see, ``consequence`` for this answer, and the grant that shows it (None: nothing)."""
    return None if sees_all else f"{HIDDEN_DETAILS} {consequence} {MONITOR_GRANT}"

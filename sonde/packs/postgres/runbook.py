"""The `postgres` category: connection usage, long and blocked queries, cache hits, replication lag."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.postgres import PACK
from sonde.packs.postgres.lock_findings import blocked_findings
from sonde.packs.postgres.replication_findings import replication_findings, wraparound_findings
from sonde.packs.runbook import (
    Finding,
    Reading,
    Runbook,
    RunbookStep,
    Severity,
    Threshold,
    check,
    human_seconds,
    shown_value,
)

MIB = 1024 * 1024
THRESHOLDS: dict[str, Threshold] = {
    "connection_usage_percent": Threshold(warning=80, critical=90, unit="%"),
    "long_query_s": Threshold(warning=60, critical=300, unit=" s"),
    "blocked_queries": Threshold(warning=1, critical=5),
    # the longest a blocked session has waited (seconds): any wait is a warning, as the mysql pack's
    "blocked_wait_s": Threshold(warning=0, critical=60, unit=" s"),
    "cache_hit_percent": Threshold(warning=90, critical=80, above=False, unit="%"),
    "replication_lag_s": Threshold(warning=30, critical=300, unit=" s"),
    "replication_lag_bytes": Threshold(warning=64 * MIB, critical=1024 * MIB, unit=" bytes"),
    # Seconds since WAL archiving last succeeded, while it fails: a failure within 10 minutes of a
    # success may be a blip the archiver's retries (every minute) get past; longer, WAL piles up.
    "archive_failing_s": Threshold(warning=0, critical=600, unit=" s"),
    # The age of a database's oldest unfrozen transaction (or multixact) ID. IDs wrap around at 2^31
    # (2.147e9); the server stops assigning them 3 million short of that. Autovacuum forces a freezing
    # vacuum at autovacuum_freeze_max_age (200 million by default, 2e9 at most, rarely set past 1e9),
    # so a healthy server stays near it: 1.2e9 (56 % of 2^31) means those vacuums have failed or been
    # held back for a billion transactions, with about 0.95e9 left: a day at 10,000 transactions a
    # second, weeks at most servers' rate. 1.6e9 (75 %) leaves about 0.55e9, 15 hours at 10,000 a
    # second: act now.
    "xid_age": Threshold(warning=1.2e9, critical=1.6e9),
}
MIN_BLOCK_ACCESSES = 10_000  # a hit ratio over fewer block accesses says little
SHORT_COUNT_S = 3600  # a hit ratio counted over less time says little about shared_buffers


def client_limit_text(reading: Reading) -> str:
    """How the slots ordinary clients may use are counted: "17 (max_connections 20 less 3 ...)"."""
    limit = reading.get("client_limit", reading.get("max_connections"))
    reserved = [f"{reading.get('superuser_reserved', 0)} superuser_reserved_connections"]
    if reading.get("reserved_connections"):
        reserved.append(
            f"{reading['reserved_connections']} reserved_connections (pg_use_reserved_connections)"
        )
    return f"{limit} (max_connections {reading.get('max_connections')} less {' and '.join(reserved)})"


def connection_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "postgres.connections.usage"
    states = ", ".join(f"{state} {n}" for state, n in reading.get("by_state", {}).items())
    hidden = (
        " "
        + (
            reading.get("visibility")
            or "Other users' sessions' states are hidden from the agent's login: grant it pg_monitor."
        )
        if reading.get("hidden_sessions")
        else ""
    )
    sonde = reading.get("sonde_sessions") or 0
    own = (
        f" Sonde's {sonde} other sessions, beside this probe's, held slots too while it read."
        if sonde
        else ""
    )
    in_use = f"{reading.get('total')} client connections ({states}) of the {client_limit_text(reading)}"
    free = reading.get("free_client_slots")
    left = "" if free is None else f"; {free} left before their logins are refused"
    fix = f"Look for leaks ('idle', 'idle in transaction') or add a pooler.{own}{hidden}"
    if reading.get("clients_refused"):
        return [
            Finding(
                "critical",
                f"PostgreSQL refuses new connections: all {reading.get('client_limit')} slots for ordinary "
                "clients are taken",
                f"{in_use} that roles other than superusers may use: their logins already fail with "
                f"'remaining connection slots are reserved'. {fix}",
                probe,
            )
        ]
    return check(
        thresholds["connection_usage_percent"],
        reading.get("usage_percent"),
        probe,
        "PostgreSQL uses {value} of the connection slots for ordinary clients",
        f"{in_use} that roles other than superusers may use{left}. {fix}",
    )


STATEMENT_IS_TRANSACTION_S = 1.0  # a statement started this soon after its transaction is the transaction


def running_s(query: Reading) -> float:
    """How long a session has run: its transaction's age, or its statement's outside one."""
    return max(query.get("transaction_s") or 0, query.get("duration_s") or 0)


def unjudged_findings(reading: Reading) -> list[Finding]:
    """An info finding when the login could not see other users' sessions' start times."""
    unjudged = reading.get("unjudged_sessions") or 0
    if not unjudged:
        return []
    return [
        Finding(
            "info",
            f"{unjudged} PostgreSQL sessions could not be checked for long queries",
            reading.get("visibility")
            or "The agent's login cannot see other users' start times: grant it pg_monitor.",
            "postgres.queries.long_running",
        )
    ]


IDLE_IN_TRANSACTION = "idle in transaction"
ABORTED = "idle in transaction (aborted)"
# idle in a transaction this long since its last statement, its client has left it open (below it, a
# transaction busy with short statements, caught between two)
LEFT_IDLE_S = 5.0


def left_idle(session: Reading) -> bool:
    if session.get("state") == ABORTED:
        return True
    return session.get("state") == IDLE_IN_TRANSACTION and (session.get("idle_s") or 0) >= LEFT_IDLE_S


def idle_transaction_finding(severity: Severity, session: Reading) -> Finding:
    """A transaction its client left open and idle: named so, with how long it has sat idle.

    Both durations read alike (`human_seconds`), the idle one never past the open one: a
    transaction is idle only for part of the time it has been open."""
    open_s = running_s(session)
    idle_s = session.get("idle_s")
    idle = human_seconds(min(idle_s, open_s)) if idle_s is not None else "an unknown time"
    opened = human_seconds(open_s)
    who = (
        f"PID {session['pid']} (user {session.get('user')}, database {session.get('database')}, application "
        f"'{session.get('application_name') or ''}')"
    )
    last = f"Its last statement: {(session.get('query') or '')[:200]}"
    end = (
        f"Its client must COMMIT or ROLLBACK; if the client is gone, pg_terminate_backend({session['pid']}) "
        "ends it. idle_in_transaction_session_timeout ends such sessions by itself."
    )
    if session.get("state") == ABORTED:
        title = f"A failed PostgreSQL transaction has been left open and idle for {idle}"
        detail = (
            f"{who} is '{ABORTED}' since its last statement ended, {idle} ago: a statement in its "
            "transaction failed, and every statement its client sends fails until it rolls back. It holds "
            f"a connection (no locks: they went with the error). {last}. {end}"
        )
    else:
        title = f"A PostgreSQL transaction has been left open and idle for {idle} (open {opened})"
        detail = (
            f"{who} is '{IDLE_IN_TRANSACTION}': its transaction has been open {opened}, and idle since its "
            f"last statement ended, {idle} ago. Until it ends it holds every lock it took, blocking "
            f"sessions that want them, and keeps VACUUM from removing the rows deleted or updated since "
            f"it began. {last}. {end}"
        )
    return Finding(severity, title, detail, "postgres.queries.long_running")


def running_finding(severity: Severity, session: Reading) -> Finding:
    """A statement running long, or a transaction open long (busy, or between two statements)."""
    statement_s = session.get("duration_s") or 0
    value = shown_value(round(running_s(session), 1), " s")
    one_statement = session_kind(session) == QUERY
    return Finding(
        severity,
        f"A PostgreSQL query has been running for {value}"
        if one_statement
        else f"A PostgreSQL transaction has been open for {value}",
        f"PID {session['pid']} ({session.get('state')}, user {session.get('user')}"
        + (
            ""
            if one_statement
            else f", its current or last statement started {human_seconds(statement_s)} ago"
        )
        + f"): {(session.get('query') or '')[:200]}",
        "postgres.queries.long_running",
    )


# the kinds of long-running session, each its own finding, in this order
ABORTED_KIND, LEFT_IDLE, TRANSACTION, QUERY = "aborted", "left idle", "transaction", "query"
SESSIONS_NAMED = 5  # of a kind, besides its oldest


def session_kind(session: Reading) -> str:
    """Which finding a long-running session belongs to: a statement it runs, or its transaction's state."""
    if session.get("state") == ABORTED:
        return ABORTED_KIND
    if left_idle(session):
        return LEFT_IDLE
    statement_s = session.get("duration_s") or 0
    return QUERY if running_s(session) - statement_s < STATEMENT_IS_TRANSACTION_S else TRANSACTION


def many_title(kind: str, count: int, oldest: Reading, over: str) -> str:
    """The title of ``count`` sessions of one kind, naming the oldest's age."""
    age = human_seconds(running_s(oldest))
    return {
        ABORTED_KIND: f"{count} failed PostgreSQL transactions have been left open and idle, the oldest open {age}",
        LEFT_IDLE: f"{count} PostgreSQL transactions have been left open and idle, the oldest open {age}",
        TRANSACTION: f"{count} PostgreSQL transactions have been open for over {over}, the oldest for {age}",
        QUERY: f"{count} PostgreSQL queries have been running for over {over}, the longest for {age}",
    }[kind]


def kind_finding(threshold: Threshold, kind: str, sessions: list[Reading], truncated: bool) -> Finding:
    """One finding for the long sessions of one kind (oldest first): the oldest told in full, the others
    counted and named (`SESSIONS_NAMED` of them), its severity the oldest's."""
    oldest = sessions[0]
    severity = threshold.severity(running_s(oldest)) or "warning"
    told = idle_transaction_finding if kind in (ABORTED_KIND, LEFT_IDLE) else running_finding
    finding = told(severity, oldest)
    if len(sessions) == 1 and not truncated:
        return finding
    others = ", ".join(
        f"PID {s['pid']} ({s.get('state')}, {human_seconds(running_s(s))})"
        for s in sessions[1:][:SESSIONS_NAMED]
    )
    more = len(sessions) - 1 - SESSIONS_NAMED
    detail = f"The oldest: {finding.detail}"
    if others:
        detail += f" Also: {others}" + (f" and {more} more" if more > 0 else "") + "."
    if truncated:
        detail += " The probe listed only the oldest sessions: more are past the threshold."
    title = many_title(kind, len(sessions), oldest, human_seconds(threshold.warning))
    return Finding(severity, title if len(sessions) > 1 else finding.title, detail, finding.probe)


def long_query_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """Every session past the long-query threshold, one finding for each kind (`session_kind`):
    a failed transaction left idle, a transaction left idle, one open, a query running."""
    threshold = thresholds["long_query_s"]
    past = [q for q in reading.get("queries", []) if threshold.severity(running_s(q)) is not None]
    by_kind: dict[str, list[Reading]] = {kind: [] for kind in (ABORTED_KIND, LEFT_IDLE, TRANSACTION, QUERY)}
    for session in sorted(past, key=running_s, reverse=True):
        by_kind[session_kind(session)].append(session)
    truncated = bool(reading.get("truncated"))
    found = [
        kind_finding(threshold, kind, sessions, truncated) for kind, sessions in by_kind.items() if sessions
    ]
    return found + unjudged_findings(reading)


def counting_period(reading: Reading) -> str:
    """How long the cache counts have run, and since what: "since the server started 3.2 days ago"."""
    counted = human_seconds(reading.get("counted_s"))
    if reading.get("counted_from") == "statistics reset":
        return f"since the statistics were reset {counted} ago"
    return f"since the server started {counted} ago (or longer: a clean restart keeps the counts)"


def cache_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """A low hit ratio over hours blames shared_buffers; over a short period (`SHORT_COUNT_S`) it is
    said, at info level, as saying little yet."""
    if reading.get("hits", 0) + reading.get("reads", 0) < MIN_BLOCK_ACCESSES:
        return []
    probe, counted_s = "postgres.cache.hit_ratio", reading.get("counted_s")
    if counted_s is None:  # an older agent's reading: no time base
        return check(
            thresholds["cache_hit_percent"],
            reading.get("hit_percent"),
            probe,
            "PostgreSQL buffer cache hit ratio is only {value}",
            "Many reads miss shared_buffers; consider raising it or look for sequential scans.",
        )
    found = check(
        thresholds["cache_hit_percent"],
        reading.get("hit_percent"),
        probe,
        f"PostgreSQL buffer cache hit ratio is only {{value}} over the last {human_seconds(counted_s)}",
        f"Counted {counting_period(reading)}: many reads miss shared_buffers; consider raising it or "
        "look for sequential scans.",
    )
    if not found or counted_s >= SHORT_COUNT_S:
        return found
    return [
        Finding(
            "info",
            found[0].title,
            f"Counted {counting_period(reading)}: over so short a period a few large reads (a start with "
            "a cold cache, a backup, a report) weigh heavily, and the ratio says little about "
            "shared_buffers yet. Read it again after an hour or more of ordinary load.",
            probe,
        )
    ]


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="postgres",
        description=(
            "PostgreSQL connection usage, long and blocked queries, cache hit ratio, replication and WAL "
            "archiving, autovacuum turned off, and transaction ID wraparound."
        ),
        steps=(
            RunbookStep("postgres.connections.usage", partial(connection_findings, thresholds)),
            RunbookStep(
                "postgres.queries.long_running",
                partial(long_query_findings, thresholds),
                {"min_duration_s": thresholds["long_query_s"].warning},
            ),
            RunbookStep("postgres.locks.blocked", partial(blocked_findings, thresholds)),
            RunbookStep("postgres.cache.hit_ratio", partial(cache_findings, thresholds)),
            RunbookStep("postgres.replication.status", partial(replication_findings, thresholds)),
            RunbookStep("postgres.vacuum.wraparound", partial(wraparound_findings, thresholds)),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

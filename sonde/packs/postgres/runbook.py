"""The `postgres` category: connection usage, long and blocked queries, cache hits, replication lag."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.postgres import PACK
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check

MIB = 1024 * 1024
THRESHOLDS: dict[str, Threshold] = {
    "connection_usage_percent": Threshold(warning=80, critical=90, unit="%"),
    "long_query_s": Threshold(warning=60, critical=300, unit=" s"),
    "blocked_queries": Threshold(warning=1, critical=5),
    "cache_hit_percent": Threshold(warning=90, critical=80, above=False, unit="%"),
    "replication_lag_s": Threshold(warning=30, critical=300, unit=" s"),
    "replication_lag_bytes": Threshold(warning=64 * MIB, critical=1024 * MIB, unit=" bytes"),
}
MIN_BLOCK_ACCESSES = 10_000  # a hit ratio over fewer block accesses says little


def connection_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    states = ", ".join(f"{state} {n}" for state, n in reading.get("by_state", {}).items())
    hidden = (
        " Other users' sessions' states are hidden from the agent's login: grant it pg_monitor."
        if reading.get("hidden_sessions")
        else ""
    )
    return check(
        thresholds["connection_usage_percent"],
        reading.get("usage_percent"),
        "postgres.connections.usage",
        "PostgreSQL uses {value} of max_connections",
        f"{reading.get('total')} of {reading.get('max_connections')} connections ({states}); new clients "
        f"will be refused at the limit. Look for leaks ('idle') or add a pooler.{hidden}",
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


def long_query_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    queries = reading.get("queries", [])
    if not queries:
        return unjudged_findings(reading)
    longest = max(queries, key=running_s)
    statement_s = longest["duration_s"] or 0
    one_statement = running_s(longest) - statement_s < STATEMENT_IS_TRANSACTION_S
    return check(
        thresholds["long_query_s"],
        round(running_s(longest), 1),
        "postgres.queries.long_running",
        "A PostgreSQL query has been running for {value}"
        if one_statement
        else "A PostgreSQL transaction has been open for {value}",
        f"{len(queries)} long-running; the longest is PID {longest['pid']} ({longest['state']}, user "
        f"{longest['user']}"
        + ("" if one_statement else f", its current or last statement started {statement_s:.1f} s ago")
        + f"): {(longest['query'] or '')[:200]}",
    ) + unjudged_findings(reading)


def blocked_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    blocked = reading.get("blocked", [])
    blockers = sorted({pid for row in blocked for pid in row["blocking_pids"]})
    hidden = (
        " Some of these sessions are other users', whose queries and states are hidden from the agent's "
        "login: grant it pg_monitor."
        if reading.get("hidden_sessions")
        else ""
    )
    return check(
        thresholds["blocked_queries"],
        len(blocked),
        "postgres.locks.blocked",
        "{value} PostgreSQL sessions are blocked by locks",
        f"Blocked PIDs {[row['pid'] for row in blocked][:10]} wait on PIDs {blockers[:10]}.{hidden}",
    )


def cache_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    if reading.get("hits", 0) + reading.get("reads", 0) < MIN_BLOCK_ACCESSES:
        return []
    return check(
        thresholds["cache_hit_percent"],
        reading.get("hit_percent"),
        "postgres.cache.hit_ratio",
        "PostgreSQL buffer cache hit ratio is only {value}",
        "Many reads miss shared_buffers; consider raising it or look for sequential scans.",
    )


def replication_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "postgres.replication.status"
    found: list[Finding] = []
    standby = reading.get("standby")
    if standby is not None:
        found += check(
            thresholds["replication_lag_s"],
            standby.get("replay_delay_s"),
            probe,
            "This standby replays {value} behind its primary",
            f"WAL receiver: {standby.get('receiver_status')}.",
        )
    for replica in reading.get("replicas", []):
        name = replica.get("application_name") or replica.get("client")
        found += check(
            thresholds["replication_lag_s"],
            replica.get("replay_lag_s"),
            probe,
            f"Replica {name} lags {{value}} behind",
            f"state {replica.get('state')}, {replica.get('sync_state')}.",
        )
        found += check(
            thresholds["replication_lag_bytes"],
            replica.get("replay_lag_bytes"),
            probe,
            f"Replica {name} lags {{value}} of WAL behind",
            f"state {replica.get('state')}.",
        )
    for slot in reading.get("slots", []):
        if not slot.get("active"):
            found += check(
                thresholds["replication_lag_bytes"],
                slot.get("retained_wal_bytes"),
                probe,
                f"Inactive replication slot {slot['name']} retains {{value}} of WAL",
                "An unused slot keeps WAL until the disk fills; drop it if its consumer is gone.",
            )
    return found


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="postgres",
        description="PostgreSQL connection usage, long and blocked queries, cache hit ratio and replication lag.",
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
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

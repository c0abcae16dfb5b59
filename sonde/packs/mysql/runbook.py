"""The `mysql` category: connection usage, slow and long queries, lock waits, buffer pool hits, deadlocks."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.mysql import PACK
from sonde.packs.mysql.lock_findings import lock_wait_findings, long_query_findings
from sonde.packs.runbook import (
    Finding,
    Reading,
    Runbook,
    RunbookStep,
    Threshold,
    check,
    human_bytes,
    human_seconds,
)

THRESHOLDS: dict[str, Threshold] = {
    "connection_usage_percent": Threshold(warning=80, critical=90, unit="%"),
    # the average since start: a rate over minutes or days, not seconds
    "slow_queries_per_minute_since_start": Threshold(warning=1, critical=10, unit="/min"),
    # how many finished inside the runbook's short sample: one alone is no finding
    "slow_queries_in_sample": Threshold(warning=3, critical=10),
    "buffer_pool_hit_percent": Threshold(warning=95, critical=90, above=False, unit="%"),
    "row_lock_current_waits": Threshold(warning=1, critical=10),
    # a statement running, or a transaction open, this long (seconds)
    "long_query_s": Threshold(warning=60, critical=300, unit=" s"),
    # threads waiting behind one blocker, and the longest of their waits (seconds): any wait is a warning
    "lock_waiters": Threshold(warning=1, critical=5),
    "lock_wait_s": Threshold(warning=0, critical=60, unit=" s"),
    # averages since start, over enough events (MIN_DEADLOCKS, MIN_ROW_LOCK_WAITS)
    "deadlocks_per_hour_since_start": Threshold(warning=1, critical=10, unit="/h"),
    "row_lock_time_avg_ms": Threshold(warning=1000, critical=10_000, unit=" ms"),
}
MIN_READ_REQUESTS = 10_000  # a hit ratio over fewer requests says little
MIN_SLOW_QUERIES = 10  # an average over fewer slow queries (soon after a start) says little
MIN_DEADLOCKS = 10  # fewer since start: an info finding, not a rate to judge
MIN_ROW_LOCK_WAITS = 10  # an average wait over fewer waits says little
SAMPLE_S = 1.0  # the runbook's status sample, in seconds


def status_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "mysql.status.summary"
    found = check(
        thresholds["connection_usage_percent"],
        reading.get("connection_usage_percent"),
        probe,
        "MySQL uses {value} of max_connections",
        f"{reading.get('threads_connected')} of {reading.get('max_connections')} connections, Sonde's "
        f"own not counted (highest since start: {reading.get('max_used_connections')}); at the limit new "
        "clients get 'Too many connections'. See mysql.processes.list include_sleeping=true.",
    )
    return found + slow_query_findings(thresholds, reading)


def slow_query_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """Slow queries on average since start (over enough of them), and how many finished in the sample."""
    probe = "mysql.status.summary"
    about = (
        f"Queries slower than long_query_time={reading.get('long_query_time_s')} s "
        f"({reading.get('slow_queries_total')} since the server started {human_seconds(reading.get('uptime_s'))} ago; "
        f"slow query log {'on' if reading.get('slow_query_log') else 'off'}). See mysql.processes.list."
    )
    found: list[Finding] = []
    if reading.get("slow_queries_total", 0) >= MIN_SLOW_QUERIES:
        found += check(
            thresholds["slow_queries_per_minute_since_start"],
            reading.get("slow_queries_per_minute_since_start"),
            probe,
            "MySQL has averaged {value} slow queries since start",
            about,
        )
    sample_s = round(reading.get("sample_s") or 0, 1)
    found += check(
        thresholds["slow_queries_in_sample"],
        reading.get("slow_queries_in_sample"),
        probe,
        f"{{value}} MySQL slow queries finished in the last {sample_s:g} s",
        about,
    )
    return found


def innodb_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "mysql.innodb.summary"
    found: list[Finding] = []
    if reading.get("read_requests", 0) >= MIN_READ_REQUESTS:
        found += check(
            thresholds["buffer_pool_hit_percent"],
            reading.get("buffer_pool_hit_percent"),
            probe,
            "InnoDB buffer pool hit ratio is only {value}",
            f"Buffer pool of {human_bytes(reading.get('buffer_pool_size_bytes'))}; "
            f"{reading.get('disk_reads')} of {reading.get('read_requests')} page reads since start went to "
            "disk. Raise innodb_buffer_pool_size if memory allows.",
        )
    found += check(
        thresholds["row_lock_current_waits"],
        reading.get("row_lock_current_waits"),
        probe,
        "{value} InnoDB row lock waits right now",
        "Transactions wait on row locks held by others: mysql.locks.waits names the blocking threads "
        "(it needs the PROCESS privilege).",
        title_one="{value} InnoDB row lock wait right now",
    )
    return found + deadlock_findings(thresholds, reading) + row_lock_time_findings(thresholds, reading)


def deadlock_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """Deadlocks since start (MariaDB counts them): a rate over enough of them, else an info finding."""
    deadlocks = reading.get("deadlocks") or 0
    if not deadlocks:
        return []
    rate = reading.get("deadlocks_per_hour_since_start")
    detail = (
        f"{deadlocks} since the server started {human_seconds(reading.get('uptime_s'))} ago. InnoDB rolled "
        "back one transaction of each; the client got error 1213 and should retry. SHOW ENGINE INNODB STATUS "
        "shows the latest (LATEST DETECTED DEADLOCK); innodb_print_all_deadlocks logs every one."
    )
    judged = (
        check(
            thresholds["deadlocks_per_hour_since_start"],
            rate,
            "mysql.innodb.summary",
            "InnoDB has averaged {value} deadlocks since start",
            detail,
        )
        if deadlocks >= MIN_DEADLOCKS
        else []
    )
    return judged or [
        Finding(
            "info", f"{deadlocks} InnoDB deadlocks since start ({rate:g}/h)", detail, "mysql.innodb.summary"
        )
    ]


def row_lock_time_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """The average row lock wait since start, over enough waits."""
    waits = reading.get("row_lock_waits") or 0
    if waits < MIN_ROW_LOCK_WAITS:
        return []
    average_ms = reading.get("row_lock_time_avg_ms")
    return check(
        thresholds["row_lock_time_avg_ms"],
        average_ms,
        "mysql.innodb.summary",
        f"InnoDB row lock waits have averaged {human_seconds((average_ms or 0) / 1000)} since start",
        f"{waits} row lock waits since start. Transactions hold row locks long: look for open transactions "
        "in mysql.processes.list and who blocks whom now in mysql.locks.waits.",
    )


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="mysql",
        description=(
            "MySQL/MariaDB connection usage, slow and long-running queries, lock waits and who blocks them, "
            "buffer pool hit ratio and deadlocks."
        ),
        steps=(
            RunbookStep(
                "mysql.status.summary", partial(status_findings, thresholds), {"interval_s": SAMPLE_S}
            ),
            RunbookStep(
                "mysql.processes.list",
                partial(long_query_findings, thresholds),
                {"min_time_s": int(thresholds["long_query_s"].warning)},
            ),
            RunbookStep("mysql.locks.waits", partial(lock_wait_findings, thresholds)),
            RunbookStep("mysql.innodb.summary", partial(innodb_findings, thresholds)),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

"""The `mysql` category: connection usage, slow queries, buffer pool hits and row lock waits."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.mysql import PACK
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check

THRESHOLDS: dict[str, Threshold] = {
    "connection_usage_percent": Threshold(warning=80, critical=90, unit="%"),
    # the average since start: a rate over minutes or days, not seconds
    "slow_queries_per_minute_since_start": Threshold(warning=1, critical=10, unit="/min"),
    # how many finished inside the runbook's short sample: one alone is no finding
    "slow_queries_in_sample": Threshold(warning=3, critical=10),
    "buffer_pool_hit_percent": Threshold(warning=95, critical=90, above=False, unit="%"),
    "row_lock_current_waits": Threshold(warning=1, critical=10),
}
MIN_READ_REQUESTS = 10_000  # a hit ratio over fewer requests says little
MIN_SLOW_QUERIES = 10  # an average over fewer slow queries (soon after a start) says little
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
        f"({reading.get('slow_queries_total')} since the server started {reading.get('uptime_s')} s ago; "
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
            f"Buffer pool of {reading.get('buffer_pool_size_bytes')} bytes; reads go to disk.",
        )
    found += check(
        thresholds["row_lock_current_waits"],
        reading.get("row_lock_current_waits"),
        probe,
        "{value} InnoDB row lock waits right now",
        "Transactions wait on row locks; see mysql.processes.list for the long-running ones.",
    )
    return found


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="mysql",
        description="MySQL/MariaDB connection usage, slow queries, buffer pool hit ratio and row lock waits.",
        steps=(
            RunbookStep(
                "mysql.status.summary", partial(status_findings, thresholds), {"interval_s": SAMPLE_S}
            ),
            RunbookStep("mysql.innodb.summary", partial(innodb_findings, thresholds)),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

"""The `redis` category: memory near maxmemory, evictions, rejected connections, replication link down."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.redis import PACK
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check

THRESHOLDS: dict[str, Threshold] = {
    "memory_percent_of_max": Threshold(warning=80, critical=95, unit="%"),
    "evicted_keys": Threshold(warning=1, critical=10_000),
    "rejected_connections": Threshold(warning=1, critical=100),
    "replica_lag_s": Threshold(warning=10, critical=60, unit=" s"),
}


def since_start(reading: Reading) -> str:
    """How long a Redis counter has been counting, with the uptime when the reading has it."""
    uptime = reading.get("uptime_s")
    started = "since the server started" + (f" {uptime} s ago" if uptime is not None else "")
    return f"{started} (or since its last CONFIG RESETSTAT)"


def maxmemory_now(reading: Reading) -> str:
    """The current maxmemory setting in words: 0 means no limit, noeviction means nothing is evicted."""
    limit, policy = reading.get("maxmemory_bytes"), reading.get("maxmemory_policy")
    setting = f"maxmemory {'0 (no limit)' if limit == 0 else f'{limit} bytes'}, policy {policy}"
    if limit == 0 or policy == "noeviction":
        return f"{setting}: nothing is evicted under it, so these evictions happened under an earlier setting"
    return setting


def at_the_limit(policy: str | None) -> str:
    """What Redis does at maxmemory under ``policy``, in words: a volatile-* policy evicts only keys with a TTL."""
    if policy == "noeviction":
        return "refuses writes with an OOM error"
    if policy is not None and policy.startswith("volatile-"):
        return (
            "evicts only keys that have a TTL; when no key has one, writes fail with an OOM error "
            "just as under noeviction"
        )
    if policy is not None and policy.startswith("allkeys-"):
        return "evicts keys, any key, with or without a TTL"
    return "evicts keys or refuses writes, as its policy says"


def memory_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "redis.memory.details"
    found = check(
        thresholds["memory_percent_of_max"],
        reading.get("used_percent_of_max"),
        probe,
        "Redis uses {value} of maxmemory",
        f"{reading.get('used_bytes')} of {reading.get('maxmemory_bytes')} bytes; policy "
        f"{reading.get('maxmemory_policy')}: at the limit Redis {at_the_limit(reading.get('maxmemory_policy'))}.",
    )
    found += check(
        thresholds["evicted_keys"],
        reading.get("evicted_keys"),
        probe,
        "Redis has evicted {value} keys since start",
        f"Counted {since_start(reading)}: keys dropped to stay under maxmemory as it was set then; if Redis "
        f"is not a pure cache, data was lost. Now: {maxmemory_now(reading)}.",
    )
    return found


def client_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    return check(
        thresholds["rejected_connections"],
        reading.get("rejected_connections"),
        "redis.server.info",
        "Redis has rejected {value} connections since start",
        f"Counted {since_start(reading)}: clients refused because maxclients was reached at the time. "
        f"Now: maxclients {reading.get('maxclients')}, {reading.get('connected_clients')} clients connected.",
    )


def replication_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "redis.replication.status"
    found: list[Finding] = []
    if reading.get("master_link_status") == "down":
        found.append(
            Finding(
                "critical",
                "Redis replica has lost its primary",
                f"Link to {reading.get('master_host')}:{reading.get('master_port')} is down "
                f"(for {reading.get('master_link_down_s')} s); this replica serves stale data.",
                probe,
            )
        )
    for replica in reading.get("replicas", []):
        found += check(
            thresholds["replica_lag_s"],
            replica.get("lag_s"),
            probe,
            f"Redis replica {replica['address']} lags {{value}}",
            f"state {replica.get('state')}.",
        )
    return found


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="redis",
        description="Redis memory against maxmemory, evictions, rejected connections and replication.",
        steps=(
            RunbookStep("redis.memory.details", partial(memory_findings, thresholds)),
            RunbookStep("redis.server.info", partial(client_findings, thresholds)),
            RunbookStep("redis.replication.status", partial(replication_findings, thresholds)),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

"""The `nginx` category: a failing config test, a high share of 5xx answers, errors in the error log."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.nginx import PACK
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check

THRESHOLDS: dict[str, Threshold] = {
    "server_error_percent": Threshold(warning=1, critical=5, unit="%"),
    "error_log_errors": Threshold(warning=10, critical=100),
}
MIN_REQUESTS_FOR_SHARE = 20  # a share over fewer requests says little
SEVERE_LEVELS = ("error", "crit", "alert", "emerg")


def config_findings(reading: Reading) -> list[Finding]:
    if reading.get("ok"):
        return []
    if reading.get("permission_problem"):  # nothing wrong with nginx: the agent's user cannot run the test
        detail = reading.get("note") or "nginx -t needs files this user may not open; run `sudo nginx -t`"
        return [
            Finding("info", "nginx config test cannot run as the agent's user", detail, "nginx.config.test")
        ]
    first = next((m for m in reading.get("messages", []) if m["level"] in ("emerg", "alert", "crit")), None)
    where = f" ({first['file']}:{first['line']})" if first and first.get("file") else ""
    cause = f"{first['text']}{where}" if first else "see the messages of nginx.config.test"
    return [
        Finding(
            "critical",
            "nginx config test fails",
            f"The next reload or restart of nginx will fail: {cause}.",
            "nginx.config.test",
        )
    ]


def traffic_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    if reading.get("requests", 0) < MIN_REQUESTS_FOR_SHARE:
        return []
    worst = [p for p in reading.get("top_paths", []) if p["server_errors"]]
    paths = ", ".join(f"{p['path']} ({p['server_errors']})" for p in worst[:5]) or "no single path"
    return check(
        thresholds["server_error_percent"],
        reading.get("server_error_percent"),
        "nginx.status.summary",
        "{value} of nginx requests end in a 5xx error",
        f"{reading['by_status_class']['5xx']} of the last {reading['requests']} requests; paths: {paths}. "
        "See nginx.logs.error for the upstream errors behind them.",
    )


def error_log_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    counts = reading.get("counts_by_level", {})
    return check(
        thresholds["error_log_errors"],
        sum(counts.get(level, 0) for level in SEVERE_LEVELS),
        "nginx.logs.error",
        "{value} errors in the recent nginx error log",
        f"Counts by level: {', '.join(f'{k}={v}' for k, v in counts.items() if v)}.",
    )


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="nginx",
        description="nginx config validity, share of 5xx answers and errors in the error log.",
        steps=(
            RunbookStep("nginx.config.test", config_findings),
            RunbookStep("nginx.status.summary", partial(traffic_findings, thresholds), {"lines": 1000}),
            RunbookStep("nginx.logs.error", partial(error_log_findings, thresholds), {"lines": 1000}),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

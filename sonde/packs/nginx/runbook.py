"""The `nginx` category: nginx not running, a failing config test, and in the logs' recent window
(their readings count only the entries of the last minutes) a high share of 5xx answers and
errors other than requests for missing files."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.nginx import PACK
from sonde.packs.nginx.probes import RECENT_MINUTES
from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check, human_seconds

THRESHOLDS: dict[str, Threshold] = {
    "server_error_percent": Threshold(warning=1, critical=5, unit="%"),
    "error_log_errors": Threshold(warning=10, critical=100),
}
MIN_REQUESTS_FOR_SHARE = 20  # a share over fewer requests says little
SEVERE_LEVELS = ("error", "crit", "alert", "emerg")
MISSING_FILES_NOTED = 10  # requests for missing files in the window worth an info finding


def process_findings(reading: Reading) -> list[Finding]:
    if reading.get("running", True):
        return []
    why = [
        reading.get("pid_file_note") or f"no nginx master process runs (pid file {reading.get('pid_file')})"
    ]
    if reading.get("other_masters"):
        pids = ", ".join(str(pid) for pid in reading["other_masters"])
        why.append(f"nginx masters of other configs run (PIDs {pids}), none of {reading.get('config')}")
    crashed = "stale pid file" in (reading.get("pid_file_note") or "")
    if crashed or reading.get("enabled_at_boot", True):  # meant to run: its sites are down
        return [
            Finding(
                "critical",
                "nginx is not running",
                f"No nginx master process serves {reading.get('config')}: {'; '.join(why)}. Nothing answers "
                "its sites: start it (`systemctl start nginx`) and see its error log for why it stopped.",
                "nginx.process.status",
            )
        ]
    return [
        Finding(
            "warning",
            "nginx is installed but not running, nor started at boot",
            f"No nginx master process serves {reading.get('config')}: {'; '.join(why)}. If this machine "
            "should serve with nginx, start and enable it (`systemctl enable --now nginx`); if not, list "
            "only the packs the agent should run in its config's `enabledPacks`.",
            "nginx.process.status",
        )
    ]


def stale_log(reading: Reading) -> list[Finding] | None:
    """An info finding when the access log's newest entry (`nginx.status.summary`) is older than its
    window (None when it is recent, or there is none: judge it)."""
    age, minutes = reading.get("last_age_s"), reading.get("recent_minutes")
    if age is None or minutes is None or age <= minutes * 60:
        return None
    return [
        Finding(
            "info",
            f"the access log's newest entry is {human_seconds(age)} old: no traffic, or it logs elsewhere",
            f"Its newest entry is from {reading.get('last_time')}, so nothing was judged of the last "
            f"{minutes} minutes. If nginx serves traffic, check that the agent reads the log it writes "
            "(agent config packs.nginx.access_log, the access_log directives).",
            "nginx.status.summary",
        )
    ]


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
    stale = stale_log(reading)
    if stale is not None:
        return stale
    if reading.get("requests", 0) < MIN_REQUESTS_FOR_SHARE:
        return []
    worst = [p for p in reading.get("top_paths", []) if p["server_errors"]]
    paths = ", ".join(f"{p['path']} ({p['server_errors']})" for p in worst[:5]) or "no single path"
    return check(
        thresholds["server_error_percent"],
        reading.get("server_error_percent"),
        "nginx.status.summary",
        "{value} of nginx requests end in a 5xx error",
        f"{reading['by_status_class']['5xx']} of the {reading['requests']} requests{window_text(reading.get('recent_minutes'))}; paths: {paths}. "
        "See nginx.logs.error for the upstream errors behind them.",
    )


def window_text(minutes: int | None) -> str:
    return f" of the last {minutes} minutes" if minutes else " read"


def upstream_text(errors: list[Mapping[str, object]]) -> str:
    named = [
        f"{e['error']} x{e['count']}" + (f" ({e['upstream']})" if e.get("upstream") else "") for e in errors
    ]
    return f" Upstream errors: {'; '.join(named)}." if named else ""


def error_log_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    recent = reading.get("recent", {})
    counts = recent.get("counts_by_level", {})
    missing = recent.get("missing_files", 0)
    window = window_text(recent.get("minutes"))
    found = check(
        thresholds["error_log_errors"],
        sum(counts.get(level, 0) for level in SEVERE_LEVELS) - missing,
        "nginx.logs.error",
        f"{{value}} errors in the nginx error log{window}",
        f"Counts by level: {', '.join(f'{k}={v}' for k, v in counts.items() if v)}; not counted: "
        f"{missing} requests for missing files, {recent.get('old', 0)} older entries."
        + upstream_text(recent.get("upstream_errors", [])),
    )
    if missing >= MISSING_FILES_NOTED:
        found.append(
            Finding(
                "info",
                f"{missing} requests for missing files in the nginx error log{window}",
                "nginx logs each request for a file that does not exist at [error] (`open() ... failed "
                "(2: No such file or directory)`): 404s from a scanner or a broken link, not nginx failing.",
                "nginx.logs.error",
            )
        )
    return found


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="nginx",
        description="nginx running, config validity, and in the recent log window the share of 5xx "
        "answers and errors in the error log.",
        steps=(
            RunbookStep("nginx.process.status", process_findings),
            RunbookStep("nginx.config.test", config_findings),
            RunbookStep(
                "nginx.status.summary",
                partial(traffic_findings, thresholds),
                {"lines": 1000, "recent_minutes": RECENT_MINUTES},
            ),
            RunbookStep(
                "nginx.logs.error",
                partial(error_log_findings, thresholds),
                {"lines": 1000, "recent_minutes": RECENT_MINUTES},
            ),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

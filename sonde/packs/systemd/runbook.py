"""The `systemd` category: failed units and a burst of journal errors.

`build_runbook` takes the threshold table so a test (or an operator) can pass
its own; `RUNBOOK` uses `THRESHOLDS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from sonde.packs.runbook import Finding, Reading, Runbook, RunbookStep, Threshold, check
from sonde.packs.systemd import PACK

THRESHOLDS: dict[str, Threshold] = {
    "failed_units": Threshold(warning=1, critical=5),
    "journal_errors_last_hour": Threshold(warning=20, critical=200),
}
JOURNAL_ERRORS_PARAMS = {"priority": "err", "since": "-1h", "lines": 1000}


def failed_unit_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """One finding per failed unit; its severity grows with the number of failed units."""
    severity = thresholds["failed_units"].severity(reading.get("total", 0))
    if severity is None:
        return []
    return [
        Finding(
            severity,
            f"Unit {unit['unit']} has failed",
            f"{unit['unit']} ({unit['description']}) is {unit['active']}/{unit['sub']}; see "
            f"systemd.unit.status and systemd.journal.query with unit={unit['unit']}.",
            "systemd.units.failed",
        )
        for unit in reading.get("units", [])
    ]


def journal_error_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    entries = reading.get("entries", [])
    units = sorted({entry["unit"] or entry["identifier"] or "?" for entry in entries})
    return check(
        thresholds["journal_errors_last_hour"],
        len(entries),
        "systemd.journal.query",
        "{value} error entries in the journal in the last hour",
        f"From: {', '.join(units[:10])}{' ...' if len(units) > 10 else ''}.",
        title_one="{value} error entry in the journal in the last hour",
    )


def build_runbook(thresholds: Mapping[str, Threshold] = THRESHOLDS) -> Runbook:
    return Runbook(
        category="systemd",
        description="Failed systemd units and bursts of errors in the journal.",
        steps=(
            RunbookStep("systemd.units.failed", partial(failed_unit_findings, thresholds)),
            RunbookStep(
                "systemd.journal.query", partial(journal_error_findings, thresholds), JOURNAL_ERRORS_PARAMS
            ),
        ),
    )


RUNBOOK = build_runbook()
PACK.runbooks[RUNBOOK.category] = RUNBOOK

"""`sonde hub --audit-keep AGE`: a real hub prunes its own audit log, and the chain still verifies."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from sonde.hub.audit import PRUNE_ACTION, AuditEntry, append_many
from sonde.hub.db import open_database
from tests.e2e.procs import RunningHub, running_hub

DAY = 86400.0


def old_rows(data_dir: Path, count: int, age_days: float) -> None:
    """``count`` audit rows made ``age_days`` ago, at the start of a new hub database."""
    db = open_database(data_dir / "sonde.db")
    try:
        then = time.time() - age_days * DAY
        entries = [
            AuditEntry(actor="key:ops", action="mcp.probe", target="web-1", outcome="ok", ts=then + i)
            for i in range(count)
        ]
        append_many(db, entries)
    finally:
        db.close()


def audit_rows(hub: RunningHub) -> list[dict[str, Any]]:
    with hub.client() as http:
        listed = http.get("/api/v1/audit", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    rows: list[dict[str, Any]] = listed.json()["entries"]
    return rows


def test_the_hub_prunes_what_is_older_than_it_keeps(tmp_path: Path) -> None:
    old_rows(tmp_path / "hubdata", 25, age_days=3)
    with running_hub(tmp_path, "--audit-keep", "2d") as hub:
        pruned = hub.proc.wait_for(re.compile(r"audit retention: pruned (\d+) audit rows older than 2 days"))
        assert pruned.group(1) == "25"
        verified = hub.cli("hub", "audit", "verify")
        assert verified.returncode == 0, verified.stderr
        assert "intact" in verified.stdout + verified.stderr
        assert "pruned" in verified.stdout + verified.stderr
        rows = audit_rows(hub)
        assert not [row for row in rows if row["action"] == "mcp.probe"]  # the old rows are gone
        assert [row for row in rows if row["action"] == PRUNE_ACTION and row["actor"] == "hub"]


def test_without_audit_keep_nothing_is_pruned(tmp_path: Path) -> None:
    old_rows(tmp_path / "hubdata", 5, age_days=400)
    with running_hub(tmp_path) as hub:
        rows = audit_rows(hub)
        assert len([row for row in rows if row["action"] == "mcp.probe"]) == 5
        assert not any("audit retention" in line for line in hub.proc.lines)


def test_a_keep_shorter_than_a_day_is_refused(tmp_path: Path) -> None:
    from tests.e2e.procs import SONDE, base_env
    from tests.subprocs import run_any

    done = run_any(
        [*SONDE, "hub", "--audit-keep", "12h", "--data-dir", str(tmp_path)], env=base_env(tmp_path)
    )
    assert done.returncode == 2
    assert "--audit-keep must be at least 1d (got 12h)" in done.stderr

"""`--audit-keep` behind a row from a wrong clock: the hub says why nothing older goes, as
`sonde hub audit prune` does, once per such row rather than every hour."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.audit_prune import AuditPruned
from sonde.hub.audit_retention import HeldBack, prune_older_than
from sonde.hub.db import open_database

DAY = 86400.0
KEEP_S = 2 * DAY


def append(db_path: Path, *ages_days: float) -> None:
    """Audit rows made ``ages_days`` ago, in that order (a negative age: a clock set ahead)."""
    db = open_database(db_path)
    try:
        now = time.time()
        append_many(
            db,
            [
                AuditEntry(actor="key:ops", action="mcp.probe", outcome="ok", ts=now - age * DAY)
                for age in ages_days
            ],
        )
    finally:
        db.close()


def held_back_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sonde.hub.audit_retention"]


def test_a_row_from_a_wrong_clock_is_warned_about_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sonde.hub.audit_retention")
    db_path = tmp_path / "sonde.db"
    append(db_path, -365, 3, 3, 3)  # row 1 made a year ahead, then three made 3 days ago
    held_back = HeldBack()
    for _ in range(3):  # three hourly rounds, the same row in the way
        pruned, _ = prune_older_than(db_path, KEEP_S)
        held_back.report(pruned, KEEP_S)
    records = held_back_records(caplog)
    assert [r.levelno for r in records] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    said = records[0].getMessage()
    made = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 365 * DAY))
    assert said.startswith(
        "audit retention: no audit rows pruned: the log starts with a row made after the cutoff (2 days ago)"
    )
    assert f"3 rows older than that were kept: they come after row 1, made at {made}" in said
    assert "a prune cuts only from the start of the log (a wrong clock can put rows out of order)" in said
    assert "they stay until that row is 2 days old" in said


def test_another_row_in_the_way_is_warned_about_anew(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="sonde.hub.audit_retention")
    future = time.time() + 30 * DAY
    held_back = HeldBack()
    rounds = [
        AuditPruned(rows=0, through_seq=0, older_kept=3, newer_seq=1, newer_ts=future),
        AuditPruned(rows=0, through_seq=0, older_kept=4, newer_seq=1, newer_ts=future),
        AuditPruned(rows=5, through_seq=9, older_kept=1, newer_seq=10, newer_ts=future),
        AuditPruned(rows=2, through_seq=12, newer_seq=13, newer_ts=time.time()),  # nothing held back
        AuditPruned(rows=0, through_seq=12, older_kept=1, newer_seq=13, newer_ts=future),
    ]
    for pruned in rounds:
        held_back.report(pruned, KEEP_S)
    levels = [r.levelno for r in held_back_records(caplog)]
    assert levels == [logging.WARNING, logging.DEBUG, logging.WARNING, logging.WARNING]
    assert "pruned through row 9 only; 1 row older than that was kept: it comes after row 10" in (
        held_back_records(caplog)[2].getMessage()
    )

"""Pruning the audit log: old rows go, the rest still verifies, and a cut without a prune shows."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub.audit import (
    AUDIT_ANCHOR_KEY,
    PRUNE_ACTION,
    AuditEntry,
    append_many,
    verify_audit,
)
from sonde.hub.audit_prune import prune_audit
from sonde.hub.audit_query import query_audit
from sonde.hub.db import get_meta, open_database, set_meta
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_ok

DAY = 86400.0
NOW = time.time()


def aged(days: float, i: int) -> AuditEntry:
    return AuditEntry(actor="key:ops", action="probe.system.cpu", target="web-1", outcome="ok",
                      detail={"i": i}, ts=NOW - days * DAY)  # fmt: skip


def fill(db: Database) -> None:
    """30 rows 40 days old, 20 rows 10 days old, 10 rows of today."""
    append_many(db, [aged(40, i) for i in range(30)])
    append_many(db, [aged(10, i) for i in range(20)])
    append_many(db, [aged(0, i) for i in range(10)])


def test_old_rows_go_and_the_rest_still_verifies(db: Database) -> None:
    fill(db)
    pruned = prune_audit(db, NOW - 30 * DAY)
    assert (pruned.rows, pruned.through_seq) == (30, 30)
    report = verify_audit(db)
    assert report.ok, report.problem
    assert report.starts_after == 30
    assert report.rows == 31  # 20 + 10, and the prune itself
    newest = query_audit(db, limit=1)[0]
    assert newest["action"] == PRUNE_ACTION
    assert newest["detail"] == {"through_seq": 30, "rows": 30, "before_ts": NOW - 30 * DAY}

    again = prune_audit(db, NOW - 5 * DAY)  # a later prune moves the anchor on
    assert (again.rows, again.through_seq) == (20, 50)
    report = verify_audit(db)
    assert report.ok, report.problem
    assert report.starts_after == 50
    assert [r["action"] for r in query_audit(db, limit=1000)].count(PRUNE_ACTION) == 2


def test_nothing_old_enough_prunes_nothing(db: Database) -> None:
    fill(db)
    assert prune_audit(db, NOW - 60 * DAY).rows == 0
    report = verify_audit(db)
    assert report.ok
    assert report.rows == 60
    assert report.starts_after == 0


def test_a_broken_chain_is_not_pruned(db: Database) -> None:
    fill(db)
    db.execute("UPDATE audit SET outcome = 'denied' WHERE seq = 12")  # an edit in the old rows
    with pytest.raises(ValueError, match="broken at seq 12"):
        prune_audit(db, NOW - 30 * DAY)
    assert db.execute("SELECT count(*) FROM audit").fetchone()[0] == 60  # the evidence is still there


def test_rows_cut_from_the_start_without_a_prune_are_caught(db: Database) -> None:
    fill(db)
    last_cut = db.execute("SELECT seq, hash FROM audit WHERE seq = 30").fetchone()
    db.execute("DELETE FROM audit WHERE seq <= 30")
    set_meta(db, AUDIT_ANCHOR_KEY, json.dumps({"seq": last_cut[0], "hash": last_cut[1]}))
    report = verify_audit(db)
    assert not report.ok
    assert "no prune through that row is on record" in report.problem


def test_cutting_more_than_the_prune_did_is_caught(db: Database) -> None:
    fill(db)
    prune_audit(db, NOW - 30 * DAY)
    db.execute("DELETE FROM audit WHERE seq = 31")  # the first row after the anchor
    report = verify_audit(db)
    assert not report.ok
    assert report.first_bad_seq == 31
    assert get_meta(db, AUDIT_ANCHOR_KEY) is not None


def test_the_cli_prunes_beside_the_data_and_refuses_a_short_age(tmp_path: Path, db: Database) -> None:
    fill(db)
    env = base_env(tmp_path / "home")
    flags = ["--data-dir", str(tmp_path)]
    pruned = run_ok([*SONDE, "hub", "audit", "prune", "--older-than", "30d", *flags], env=env, timeout=60)
    assert "pruned 30 audit rows older than" in pruned.stderr
    assert "(through row 30)" in pruned.stderr
    verified = run_ok([*SONDE, "hub", "audit", "verify", *flags], env=env, timeout=60)
    assert "audit chain intact: 31 rows verified (rows up to 30 were pruned)" in verified.stderr
    for age, why in (("12h", "at least 1d"), ("soon", "invalid duration")):
        argv = [*SONDE, "hub", "audit", "prune", "--older-than", age, *flags]
        refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode == 2
        assert why in refused.stderr


def test_the_cli_gives_the_pruned_space_back(tmp_path: Path, db: Database) -> None:
    """A new database gives freed pages back (auto_vacuum=INCREMENTAL): the file shrinks."""
    bulky = "x" * 3000
    append_many(db, [AuditEntry(actor="key:ops", action="probe.system.cpu", target="web-1", outcome="ok",
                                detail={"pad": bulky, "i": i}, ts=NOW - 40 * DAY) for i in range(2000)])  # fmt: skip
    append_many(db, [aged(0, i) for i in range(10)])
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    file = tmp_path / "sonde.db"
    grown = file.stat().st_size
    assert grown > 4 * 2**20
    env = base_env(tmp_path / "home")
    pruned = run_ok([*SONDE, "hub", "audit", "prune", "--older-than", "30d", "--data-dir", str(tmp_path)],
                    env=env, timeout=60)  # fmt: skip
    assert "pruned 2000 audit rows" in pruned.stderr
    assert "MiB given back to the file system" in pruned.stderr
    assert file.stat().st_size < grown / 4
    assert verify_audit(db).ok


def test_an_older_database_keeps_its_pruned_space_and_says_so(tmp_path: Path) -> None:
    import sqlite3

    legacy = sqlite3.connect(tmp_path / "sonde.db")  # made as Sonde made them before auto_vacuum
    legacy.execute("PRAGMA journal_mode=WAL")
    legacy.close()
    db = open_database(tmp_path / "sonde.db")
    try:
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
        append_many(db, [aged(40, i) for i in range(5)])
    finally:
        db.close()
    pruned = run_ok([*SONDE, "hub", "audit", "prune", "--older-than", "30d", "--data-dir", str(tmp_path)],
                    env=base_env(tmp_path / "home"), timeout=60)  # fmt: skip
    assert "pruned 5 audit rows" in pruned.stderr
    assert "stays in the file for new rows" in pruned.stderr

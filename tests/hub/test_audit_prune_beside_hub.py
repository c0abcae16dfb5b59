"""A prune beside a running hub: the hub's audit writes go on, a cut stops at the first newer
row, and a prune stopped half-way leaves a log that verifies.

Before, the chain check and the whole DELETE ran in one write transaction: with 600,000
rows the hub's audit writes waited past their 5 s busy timeout and it refused calls
(503 `audit_unavailable`) for seconds. The "hub" here is a second connection that never
waits for the lock (busy timeout 0), writing from inside the prune's own statements.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub.audit import PRUNE_ACTION, AuditEntry, append_many, verify_audit
from sonde.hub.audit_prune import prune_audit
from sonde.hub.audit_query import query_audit
from sonde.hub.db import open_database
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_ok

DAY = 86400.0
NOW = time.time()
YEAR_2000 = 946684800.0  # a clock before NTP set it


def rows(count: int, ts: float) -> list[AuditEntry]:
    return [AuditEntry(actor="key:ops", action="mcp.call", target="web-1", outcome="ok", ts=ts + i)
            for i in range(count)]  # fmt: skip


class ImpatientHub:
    """Appends an audit row without waiting for the write lock: refused while another holds it."""

    def __init__(self, path: Path) -> None:
        self.db = open_database(path)
        self.db.execute("PRAGMA busy_timeout=0")
        self.written = 0
        self.refused = 0

    def try_write(self) -> None:
        try:
            append_many(self.db, rows(1, NOW))
            self.written += 1
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            self.refused += 1


def test_the_hub_writes_while_a_prune_checks_and_deletes(tmp_path: Path, db: Database) -> None:
    append_many(db, rows(3000, NOW - 200 * DAY))
    append_many(db, rows(5, NOW - 60))
    hub = ImpatientHub(tmp_path / "sonde.db")
    calls = 0

    def in_the_prune() -> int:  # SQLite calls this every 1,000 instructions of the prune's statements
        nonlocal calls
        calls += 1
        if calls % 3 == 0:
            hub.try_write()
        return 0

    db.conn.set_progress_handler(in_the_prune, 1_000)
    try:
        pruned = prune_audit(db, NOW - 100 * DAY, batch_rows=500)
    finally:
        db.conn.set_progress_handler(None, 0)
        hub.db.close()
    assert pruned.rows == 3000
    assert hub.written > 0, f"every write the hub tried during the prune was refused ({hub.refused})"
    report = verify_audit(db)
    assert report.ok, report.problem
    assert report.starts_after == 3000
    assert report.rows == 5 + hub.written + 1  # what the hub wrote meanwhile is kept, and the prune entry
    assert db.execute("SELECT count(*) FROM audit WHERE seq <= 3000").fetchone()[0] == 0


def test_the_lock_is_free_between_batches(tmp_path: Path, db: Database) -> None:
    append_many(db, rows(50, NOW - 200 * DAY))
    hub = ImpatientHub(tmp_path / "sonde.db")
    seen: list[tuple[str, int, int]] = []

    def progress(phase: str, done: int, total: int) -> None:
        seen.append((phase, done, total))
        hub.try_write()

    try:
        prune_audit(db, NOW - 100 * DAY, batch_rows=10, progress=progress)
    finally:
        hub.db.close()
    assert [s for s in seen if s[0] == "delete"] == [("delete", n, 50) for n in range(10, 51, 10)]
    assert (hub.written, hub.refused) == (len(seen), 0)
    assert verify_audit(db).ok


class Crash(Exception):
    pass


def test_a_prune_stopped_between_batches_leaves_a_log_that_verifies(tmp_path: Path, db: Database) -> None:
    append_many(db, rows(50, NOW - 200 * DAY))
    append_many(db, rows(3, NOW - 60))

    def crash_after_two(phase: str, done: int, total: int) -> None:
        if phase == "delete" and done == 20:
            raise Crash

    with pytest.raises(Crash):
        prune_audit(db, NOW - 100 * DAY, batch_rows=10, progress=crash_after_two)
    report = verify_audit(db)
    assert report.ok, report.problem
    assert (report.starts_after, report.awaiting_deletion, report.rows) == (50, 30, 4)
    flags = ["--data-dir", str(tmp_path)]
    env = base_env(tmp_path / "home")
    verified = run_ok([*SONDE, "hub", "audit", "verify", *flags], env=env, timeout=60)
    assert "audit chain intact: 4 rows verified (rows up to 50 were pruned); 30 pruned rows still wait" in (
        verified.stderr
    )

    db.execute("UPDATE audit SET outcome = 'denied' WHERE seq = 40")  # the rows left are still checked
    assert verify_audit(db).first_bad_seq == 40
    db.execute("UPDATE audit SET outcome = 'ok' WHERE seq = 40")

    finished = run_ok([*SONDE, "hub", "audit", "prune", "--older-than", "100d", *flags], env=env, timeout=60)
    assert "deleted 30 rows an interrupted prune had left" in finished.stderr
    report = verify_audit(db)
    assert report.ok, report.problem
    assert (report.starts_after, report.awaiting_deletion, report.rows) == (50, 0, 4)
    assert [r["action"] for r in query_audit(db, limit=1000)].count(PRUNE_ACTION) == 1


def test_rows_left_by_a_stopped_prune_must_end_at_the_anchor(db: Database) -> None:
    append_many(db, rows(50, NOW - 200 * DAY))
    append_many(db, rows(3, NOW - 60))

    def crash(phase: str, done: int, total: int) -> None:
        if phase == "delete":
            raise Crash

    with pytest.raises(Crash):
        prune_audit(db, NOW - 100 * DAY, batch_rows=10, progress=crash)
    db.execute("DELETE FROM audit WHERE seq = 50")  # the last pruned row, which the anchor names
    report = verify_audit(db)
    assert not report.ok
    assert report.first_bad_seq == 50


def sonde_prune(tmp_path: Path, age: str) -> str:
    argv = [*SONDE, "hub", "audit", "prune", "--older-than", age, "--data-dir", str(tmp_path)]
    return run_ok(argv, env=base_env(tmp_path / "home"), timeout=60).stderr


def test_a_row_from_a_wrong_clock_does_not_take_newer_rows_with_it(tmp_path: Path, db: Database) -> None:
    append_many(db, rows(5, NOW - 3600))
    append_many(db, rows(1, YEAR_2000))
    append_many(db, rows(3, NOW - 60))
    said = sonde_prune(tmp_path, "180d")
    assert "no audit rows pruned: the log starts with rows newer than" in said
    assert "1 row older than that was kept: it comes after row 1, made at" in said
    assert db.execute("SELECT count(*) FROM audit").fetchone()[0] == 9
    assert verify_audit(db).ok


def test_a_cut_stops_before_the_first_row_at_or_after_the_cutoff(tmp_path: Path, db: Database) -> None:
    append_many(db, rows(10, NOW - 200 * DAY))
    append_many(db, rows(1, NOW - 3600))  # row 11: newer than the cutoff
    append_many(db, rows(5, NOW - 190 * DAY))  # rows 12-16: older, but behind row 11
    said = sonde_prune(tmp_path, "180d")
    assert "pruned 10 audit rows older than" in said
    assert "(through row 10)" in said
    assert "5 rows older than that were kept: they come after row 11, made at" in said
    left = [r["seq"] for r in query_audit(db, limit=1000) if r["action"] != PRUNE_ACTION]
    assert sorted(left) == list(range(11, 17))
    report = verify_audit(db)
    assert report.ok, report.problem
    assert report.starts_after == 10

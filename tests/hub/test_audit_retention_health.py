"""`--audit-keep` and GET /api/v1/health: a prune the database refuses for a lasting reason fails
the store's `WriteHealth`, as a refused store write does, and a later prune that writes clears it;
another process's lock, which passes, does not count."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio
import trio.testing

from sonde.hub.audit_retention import keep_audit_for, prune_failure
from sonde.hub.write_health import WriteHealth
from tests.hub.test_audit_retention_held_back import KEEP_S, append

EVERY_S = 60.0


def damage(db_path: Path) -> None:
    db_path.write_bytes(b"no database here " * 512)


def replace_with_old_rows(db_path: Path) -> None:
    db_path.unlink()
    append(db_path, 3, 3, 3)


async def test_a_refused_prune_fails_health_until_a_prune_writes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    db_path = tmp_path / "sonde.db"
    damage(db_path)  # SQLITE_NOTADB, said by `sonde.hub.db` in words of its own
    health = WriteHealth()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_audit_for, db_path, KEEP_S, health, EVERY_S)
        await health.wait_failing()
        assert trio.current_time() == 0.0
        assert health.failure == "pruning the audit log (--audit-keep): file is not a database"
        replace_with_old_rows(db_path)
        await health.wait_working()
        assert trio.current_time() == EVERY_S  # the next round pruned three rows
        assert health.failure is None
        nursery.cancel_scope.cancel()


def test_only_a_lasting_refusal_counts() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = sqlite3.SQLITE_BUSY
    assert prune_failure(full) == "pruning the audit log (--audit-keep): database or disk is full"
    assert prune_failure(locked) is None
    assert prune_failure(sqlite3.OperationalError("no such table: audit")) is None

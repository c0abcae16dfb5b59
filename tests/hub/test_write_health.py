"""The store knows whether its database takes writes, whichever caller wrote (`sonde.hub.write_health`).

A write refused for a reason that lasts (full, I/O error, read-only, damaged) marks the
database failing, also one nobody waits for (an agent's last-seen time, submitted); a
write that commits a change clears it; another process's lock, an op's own refusal and a
batch that wrote nothing do neither. Before, only the audit queue's own failures were
known, and GET /api/v1/health said ok while REST writes and last-seen writes failed
(tests/e2e/test_database_unwritable_health.py drives a real hub).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import outcome
import pytest
import trio
from sqlite_utils import Database

from sonde.hub.db import get_meta, set_meta
from sonde.hub.store import StoreCommitFailed, open_store
from sonde.hub.write_health import WRITE_CHECK_META, WriteHealth, lasting_failure, retry_writes


def sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return error


def commit_failed(cause: sqlite3.Error) -> StoreCommitFailed:
    error = StoreCommitFailed(f"the write transaction failed: {cause}")
    error.__cause__ = cause
    return error


FULL = sqlite_error("database or disk is full", sqlite3.SQLITE_FULL)
LOCKED = sqlite_error("database is locked", sqlite3.SQLITE_BUSY)


def refuse_as_full(db: Database) -> None:
    raise sqlite_error("database or disk is full", sqlite3.SQLITE_FULL)


def test_what_counts_as_the_database_refusing_writes() -> None:
    assert lasting_failure(FULL) == "database or disk is full"
    assert lasting_failure(commit_failed(FULL)) == "database or disk is full"
    assert lasting_failure(sqlite_error("disk I/O error", sqlite3.SQLITE_IOERR_WRITE)) == "disk I/O error"
    readonly = sqlite_error("attempt to write a readonly database", sqlite3.SQLITE_READONLY)
    assert lasting_failure(readonly) is not None
    assert lasting_failure(commit_failed(LOCKED)) is None  # another process's lock: it passes
    assert lasting_failure(sqlite3.IntegrityError("UNIQUE constraint failed")) is None  # an op's own
    assert lasting_failure(ValueError("a bug")) is None


def test_failing_from_the_first_refusal_until_a_change_commits() -> None:
    health = WriteHealth()
    health.batch_done([outcome.Value(None)], wrote=True)
    assert health.failure is None
    health.batch_done([outcome.Value(None), outcome.Error(commit_failed(FULL))], wrote=False)
    assert health.failure == "database or disk is full"
    since = health.failing_since
    health.batch_done([outcome.Value("read through the writer")], wrote=False)  # nothing written
    health.batch_done([outcome.Error(commit_failed(LOCKED))], wrote=False)
    health.batch_done([outcome.Error(commit_failed(FULL))], wrote=True)  # changes made, then undone
    assert (health.failure, health.failing_since) == ("database or disk is full", since)
    health.batch_done([outcome.Value(None)], wrote=True)
    assert (health.failure, health.failing_since) == (None, None)


async def test_a_refused_write_nobody_waits_for_marks_the_store_failing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sonde.hub.store")
    async with open_store(tmp_path / "hub.db") as store:
        await store.submit(refuse_as_full)  # as an agent's last-seen time is written
        assert await store.write(get_meta, "nothing") is None  # a batch after it; it writes nothing
        assert store.health.failure == "database or disk is full"
        with pytest.raises(sqlite3.OperationalError):
            await store.write(refuse_as_full)  # a change an admin waits for
        assert store.health.failure == "database or disk is full"
        await store.write(set_meta, "written", "yes")
        assert store.health.failure is None
    said = [r.getMessage() for r in caplog.records]
    assert sum("the hub cannot write its database (database or disk is full)" in m for m in said) == 1
    assert sum("the hub's database takes writes again" in m for m in said) == 1


async def test_a_failing_store_tries_a_write_until_one_works(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store, trio.open_nursery() as nursery:
        nursery.start_soon(retry_writes, store, 0.05)
        await store.submit(refuse_as_full)
        assert await store.write(get_meta, WRITE_CHECK_META) is None
        assert store.health.failure is not None
        with trio.fail_after(10):  # nothing else writes: the retry finds that writes work
            await store.health.wait_working()
        assert await store.read(get_meta, WRITE_CHECK_META) is not None
        nursery.cancel_scope.cancel()

"""The store under another process's write lock: an op waits for it at most `LOCK_WAIT_S` from
when it was queued, however long the ops queued before it waited, and a queued op nobody
waits for that finds the lock held is a rate-limited warning, not an error.

The waits are SQLite's own (its busy timeout, in real time), so `LOCK_WAIT_S` is made short.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from sonde.hub import store_batches as store_module
from sonde.hub.db import get_meta, open_database, set_meta
from sonde.hub.store import StoreCommitFailed, open_store
from sonde.hub.store_batches import WriteOp, commit_batch

LOCK_WAIT_S = 0.5


@pytest.fixture(autouse=True)
def short_lock_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "LOCK_WAIT_S", LOCK_WAIT_S)


@contextmanager
def write_locked(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Hold ``db_path``'s write lock on a connection of its own, as an `sqlite3` shell does."""
    conn = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def touch(db: object, when: str) -> None:
    set_meta(db, "touched", when)  # type: ignore[arg-type]


async def test_a_write_queued_behind_a_waiting_one_waits_no_longer_in_all(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sonde.hub.store")
    db_path = tmp_path / "sonde.db"
    async with open_store(db_path) as store:
        with write_locked(db_path):
            started = time.monotonic()
            await store.submit(touch, "first")  # the writer takes it, and waits for the lock
            await trio.lowlevel.checkpoint()
            with pytest.raises(StoreCommitFailed) as refused:
                await store.write(set_meta, "tags", "x")
            waited = time.monotonic() - started
            await store.submit(touch, "again")  # found locked too, within the minute: not warned again
            with pytest.raises(StoreCommitFailed):  # queued after it: the queue is through
                await store.write(get_meta, "tags")
    assert refused.value.locked
    assert LOCK_WAIT_S * 0.8 <= waited < LOCK_WAIT_S + store_module.LOCK_WAIT_MIN_S + 0.25  # not two waits
    logged = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "sonde.hub.store"]
    assert [level for level, _ in logged] == [logging.WARNING, logging.DEBUG]
    assert logged[0][1].startswith(
        "store op touch not saved: another process held the database's write lock past the hub's 0.5 s wait"
    )
    assert "database is locked" in logged[0][1]


def test_an_op_with_time_left_waits_on_while_its_batch_mate_gives_up(tmp_path: Path) -> None:
    db_path = tmp_path / "sonde.db"
    db = open_database(db_path)
    try:
        with write_locked(db_path) as holder:
            now = time.monotonic()
            late = WriteOp(lambda db: set_meta(db, "late", "1"), "late", None, deadline=now)
            timely = WriteOp(lambda db: set_meta(db, "timely", "1"), "timely", None, deadline=now + 5)
            release = threading.Timer(0.3, lambda: holder.execute("ROLLBACK"))
            release.start()
            try:
                results = commit_batch(db, [late, timely])
            finally:
                release.join()
        assert isinstance(results[0].error, StoreCommitFailed)  # type: ignore[union-attr]
        assert results[0].error.locked  # type: ignore[union-attr]
        assert results[1].unwrap() is None
        assert (get_meta(db, "late"), get_meta(db, "timely")) == (None, "1")
    finally:
        db.close()

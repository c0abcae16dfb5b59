"""The async store: group commit, per-op failure isolation, draining, threaded reads."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from sqlite_utils import Database

from sonde.hub.db import get_meta, open_database, set_meta
from sonde.hub.keys import create_api_key, find_api_key
from sonde.hub.store import (
    Store,
    StoreClosed,
    StoreCommitFailed,
    _ReadConnections,
    _Writer,
    open_store,
)
from sonde.hub.store_batches import WriteOp, commit_batch


def count_meta(db: Database) -> int:
    return int(db.execute("SELECT count(*) FROM meta").fetchone()[0])


def set_then_fail(db: Database, key: str) -> None:
    set_meta(db, key, "half-written")
    raise ValueError(f"op for {key} failed")


async def test_concurrent_writes_are_group_committed(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        async with trio.open_nursery() as nursery:
            for i in range(500):
                nursery.start_soon(store.write, set_meta, f"k{i}", str(i))
        assert await store.read(count_meta) == 500
        stats = store.statistics()
    assert stats.ops == 500
    assert stats.failed_ops == 0
    assert stats.batches <= 20, stats
    assert stats.queued_ops == 0


async def test_write_returns_the_result(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        record, secret = await store.write(create_api_key, "alice", role="admin")
        assert await store.read(find_api_key, secret) == record


async def in_one_batch(store: Store, ops: dict[str, Callable[[Database, str], object]]) -> dict[str, object]:
    """Run each ``op(db, key)`` in one batch of the store's writer; what each returned or raised."""
    gate = threading.Event()
    results: dict[str, object] = {}

    def hold(db: Database) -> None:
        assert gate.wait(timeout=10)

    async def write(key: str, fn: Callable[[Database, str], object]) -> None:
        try:
            results[key] = await store.write(fn, key)
        except Exception as exc:
            results[key] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write, hold)
        await trio.testing.wait_all_tasks_blocked()  # the writer is stuck in `hold`
        for key, fn in ops.items():
            nursery.start_soon(write, key, fn)
        await trio.testing.wait_all_tasks_blocked()
        assert store.statistics().queued_ops == len(ops)
        gate.set()
    return results


def set_ok(db: Database, key: str) -> None:
    set_meta(db, key, "ok")


async def test_failing_op_raises_and_keeps_its_batch_mates(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        results = await in_one_batch(store, {"before": set_ok, "bad": set_then_fail, "after": set_ok})
        stats = store.statistics()
        assert (stats.batches, stats.ops, stats.failed_ops) == (2, 4, 1)
        assert isinstance(results["bad"], ValueError)
        assert str(results["bad"]) == "op for bad failed"
        assert await store.read(get_meta, "before") == "ok"
        assert await store.read(get_meta, "after") == "ok"
        assert await store.read(get_meta, "bad") is None


def fill_the_file(db: Database, key: str) -> None:
    """Let the file grow no more, then write past it: SQLite rolls back the whole transaction."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")
    for i in range(1000):
        set_meta(db, f"{key}-{i}", os.urandom(200).hex())


async def test_a_transaction_sqlite_rolled_back_fails_the_whole_batch(tmp_path: Path) -> None:
    # Before, the ops run before the failing one were answered as written, though SQLite had
    # undone them with the whole transaction, and the ops after it ran outside any transaction.
    async with open_store(tmp_path / "hub.db") as store:
        results = await in_one_batch(store, {"before": set_ok, "full": fill_the_file, "after": set_ok})
        for key in ("before", "full", "after"):
            failed = results[key]
            assert isinstance(failed, StoreCommitFailed), (key, failed)
            assert "database or disk is full" in str(failed)
            assert isinstance(failed.__cause__, sqlite3.OperationalError)
            assert await store.read(get_meta, key) is None
        assert await store.read(count_meta) == 0
        assert store.statistics().failed_ops == 3


async def test_submit_then_exit_drains(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    async with open_store(path) as store:
        for i in range(300):
            await store.submit(set_meta, f"k{i}", "v")
    db = open_database(path)
    try:
        assert count_meta(db) == 300
    finally:
        db.close()


async def test_failed_submit_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="sonde.hub.store")
    async with open_store(tmp_path / "hub.db") as store:
        await store.submit(set_then_fail, "bad")
        await store.submit(set_meta, "good", "v")
    assert "store op set_then_fail failed" in caplog.text
    assert "op for bad failed" in caplog.text
    assert store.statistics().failed_ops == 1


async def test_read_sees_committed_data_and_cannot_write(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        assert await store.read(get_meta, "k") is None
        await store.write(set_meta, "k", "v")
        assert await store.read(get_meta, "k") == "v"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await store.read(set_meta, "k", "changed")
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(store.read, get_meta, "k")


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    async with open_store(tmp_path / "hub.db") as store:
        pass
    with pytest.raises(StoreClosed):
        await store.write(set_meta, "k", "v")
    with pytest.raises(StoreClosed):
        await store.submit(set_meta, "k", "v")
    with pytest.raises(StoreClosed):
        await store.read(get_meta, "k")


async def submit_then_fail(path: Path) -> None:
    async with open_store(path) as store:
        await store.submit(set_meta, "k", "v")
        raise KeyError("body")


async def test_error_in_body_propagates_unwrapped(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        await submit_then_fail(tmp_path / "hub.db")
    db = open_database(tmp_path / "hub.db")
    try:
        assert get_meta(db, "k") == "v"
    finally:
        db.close()


async def test_two_stores_do_not_interfere(tmp_path: Path) -> None:
    async with open_store(tmp_path / "a.db") as first, open_store(tmp_path / "b.db") as second:
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(first.write, set_meta, f"a{i}", "1")
                nursery.start_soon(second.write, set_meta, f"b{i}", "2")
        assert await first.read(get_meta, "a0") == "1"
        assert await first.read(get_meta, "b0") is None
        assert await second.read(get_meta, "b49") == "2"
        assert await second.read(get_meta, "a49") is None
        assert first.statistics().ops == second.statistics().ops == 50


async def test_cancelled_store_finishes_its_batch_and_fails_the_queue(tmp_path: Path) -> None:
    gate = threading.Event()
    results: dict[str, str] = {}

    def hold(db: Database) -> None:
        assert gate.wait(timeout=10)
        set_meta(db, "held", "v")

    async def write(key: str, fn: Callable[[Database], None]) -> None:
        try:
            await store.write(fn)
        except StoreClosed:
            results[key] = "closed"
        else:
            results[key] = "ok"

    async def open_gate_when_stuck() -> None:
        await trio.testing.wait_all_tasks_blocked()
        gate.set()

    # The writers live outside the store's scope only so they can report how it ended.
    async with trio.open_nursery() as outer:
        with trio.CancelScope() as scope:
            async with open_store(tmp_path / "hub.db") as store:
                outer.start_soon(write, "in flight", hold)
                await trio.testing.wait_all_tasks_blocked()
                outer.start_soon(write, "queued", lambda db: set_meta(db, "queued", "v"))
                await trio.testing.wait_all_tasks_blocked()
                outer.start_soon(open_gate_when_stuck)
                scope.cancel()
                await trio.sleep_forever()
    assert results == {"in flight": "ok", "queued": "closed"}
    db = open_database(tmp_path / "hub.db")
    try:
        assert (get_meta(db, "held"), get_meta(db, "queued")) == ("v", None)
    finally:
        db.close()


def test_read_connections_outlive_the_threads_that_used_them_and_are_reused(tmp_path: Path) -> None:
    """trio retires idle worker threads: a connection per thread leaked one (and its files) each time."""
    path = tmp_path / "sonde.db"
    open_database(path).close()
    readers = _ReadConnections(path)
    seen: list[int] = []

    def one_read() -> None:
        db = readers.borrow()
        try:
            seen.append(db.execute("SELECT 1").fetchone()[0])
        finally:
            readers.give_back(db)

    for _ in range(5):  # each read on a thread that then ends, as a retired worker does
        thread = threading.Thread(target=one_read)
        thread.start()
        thread.join()
    assert seen == [1] * 5
    assert readers.opened == 1
    readers.close_all()
    with pytest.raises(StoreClosed):
        readers.borrow()


def test_a_writer_that_found_its_connection_read_only_opens_it_again(tmp_path: Path) -> None:
    """SQLite keeps a connection read-only once it opened the file so (a file system remounted
    read-only after an error, say): the store writes again once the file is writable again."""
    path = tmp_path / "sonde.db"
    open_database(path).close()
    read_only = Database(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, isolation_level=None))
    writer = _Writer(path, read_only)
    op = WriteOp(lambda db: set_meta(db, "k", "v"), "set_meta", None)
    failed = commit_batch(writer.db, [op])
    assert "readonly" in str(failed[0].error)  # type: ignore[attr-defined]
    writer.reopen_if_read_only(failed)
    assert writer.db is not read_only
    done = commit_batch(writer.db, [op])
    assert done[0].unwrap() is None
    assert get_meta(writer.db, "k") == "v"
    writer.db.close()

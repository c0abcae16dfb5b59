"""The async face of the hub's database: one writer task with group commit, threaded readers.

How it works. ``write`` and ``submit`` put an op (a plain function of the database) on a
bounded channel. One writer task takes up to MAX_BATCH_OPS queued ops and runs them in a
worker thread inside one ``BEGIN IMMEDIATE`` transaction, each op under its own SAVEPOINT
so a failing op is rolled back alone; one COMMIT then covers the batch (group commit) and
the waiting callers are woken with their op's result or exception (the batch itself:
`sonde.hub.store_batches`). ``read`` runs a
function in a worker thread (at most READ_THREADS at once) on that thread's own read-only
connection, inside one read transaction (a consistent snapshot); with WAL, readers and
the writer never block each other.

Waiting for the write lock. Another process (a backup, an ``sqlite3`` shell, an admin
command) may hold the database's write lock; an op waits for it at most LOCK_WAIT_S from
when it was queued, the hub's documented 5 s, however long the batches before it waited
(one that used its time up in the queue still gets LOCK_WAIT_MIN_S): each batch's BEGIN
waits only as long as its ops have left (SQLite's busy timeout, set per batch), and an op
whose time is up fails (`StoreCommitFailed`, ``locked``) while the others in its batch
wait on. A queued op nobody waits for (`submit`: a key's last-used
time, an agent's status) failing so is logged as a warning at most every
LOCKED_WARNING_EVERY_S, not as an error: there is nothing wrong with the hub.

Ops run in a worker thread and must not open or end transactions themselves
(``write_transaction`` / ``db.atomic()`` nest as savepoints and are fine); they should
return plain values, not lazy iterators over the connection.

After each batch the writer tells the store's `WriteHealth` whether the database took it
(`sonde.hub.write_health`): what ``GET /api/v1/health`` says of the database.

Memory bound: at most WRITE_QUEUE_SIZE queued ops plus one batch in flight.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import outcome
import trio
from sqlite_utils import Database

from sonde.hub.db import open_database, open_read_database
from sonde.hub.db_errors import is_read_only_error

# the store's own names for callers: how long an op waits for a lock, and how it fails
from sonde.hub.store_batches import LOCK_WAIT_S as LOCK_WAIT_S
from sonde.hub.store_batches import StoreClosed as StoreClosed
from sonde.hub.store_batches import StoreCommitFailed as StoreCommitFailed
from sonde.hub.store_batches import (
    WriteCounters,
    WriteOp,
    commit_batch,
    deliver,
    fail_leftovers,
    take_batch,
)
from sonde.hub.write_health import WriteHealth

WRITE_QUEUE_SIZE = 1024
READ_THREADS = 4
# how often a reader reads again when a change the hub made in memory overtook its read (a
# record re-read as an accept landed, a key looked up as it was revoked): then it gives up
REREADS_WHEN_OVERTAKEN = 8

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreStatistics:
    """Counters since the store opened: ``batches`` is the number of write transactions."""

    batches: int
    ops: int
    failed_ops: int
    queued_ops: int


@dataclass(eq=False)
class _ReadConnections:
    """Read-only connections, each lent to one worker thread at a time and kept between reads.

    There are never more than reads run at once (the read limiter), whatever threads
    trio's cache retires and starts: one connection per thread leaked a connection
    and its file handles each time an idle thread was retired. All are closed together.
    """

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _idle: list[Database] = field(default_factory=list)
    _opened: list[Database] = field(default_factory=list)
    _closed: bool = False

    def borrow(self) -> Database:
        """A connection for this read (runs in a worker thread); `give_back` it after."""
        with self._lock:
            if self._closed:
                raise StoreClosed("the store is closed")
            if self._idle:
                return self._idle.pop()
        db = open_read_database(self.path)
        with self._lock:
            if self._closed:
                db.close()
                raise StoreClosed("the store is closed")
            self._opened.append(db)
        return db

    def open_ahead(self, count: int) -> None:
        """Open ``count`` connections now (in a worker thread), each with its files open: a read
        never opens a file later, so reads go on when the process has no descriptor left
        (before, the first REST request on a hub out of them failed with a 500)."""
        for _ in range(count):
            db = open_read_database(self.path)
            with self._lock:
                self._opened.append(db)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # its files open at the first read
            self.give_back(db)

    def give_back(self, db: Database) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(db)

    @property
    def opened(self) -> int:
        return len(self._opened)

    def close_all(self) -> None:
        with self._lock:
            self._closed, opened, self._opened, self._idle = True, self._opened, [], []
        for db in opened:
            db.close()


class Store:
    """The hub's database for async code; get one from :func:`open_store`."""

    def __init__(
        self,
        path: Path,
        send: trio.MemorySendChannel[WriteOp],
        counters: WriteCounters,
        copy: Callable[[Path], Awaitable[None]],
    ) -> None:
        self.path = path
        self._send = send
        self._counters = counters
        self._readers = _ReadConnections(path)
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self._closed = False
        self.health = WriteHealth()  # whether the database takes writes, for GET /api/v1/health
        self._copy = copy  # through the writer's connection (`open_store`)

    async def copy_to(self, target: Path) -> None:
        """Copy what the writer's connection sees, every commit included, to a new database file at
        ``target``, between two batches: through the connection, so also once ``path`` is gone."""
        await self._copy(target)

    async def write(self, fn: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(db, *args, **kwargs)`` in the writer and wait until its batch is committed.

        Returns fn's result or raises fn's exception (fn's changes are then rolled back,
        its batch-mates are not). Raises StoreClosed after close, StoreCommitFailed if the
        batch could not commit. Cancelled while waiting, the op may still be committed.
        """
        done = trio.Event()
        op = WriteOp(lambda db: fn(db, *args, **kwargs), _name_of(fn), done)
        await self._enqueue(op)
        await done.wait()
        assert op.result is not None
        result: T = op.result.unwrap()
        return result

    async def submit(
        self, fn: Callable[Concatenate[Database, P], Any], *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Queue ``fn(db, *args, **kwargs)`` without waiting for it; a failure is logged.

        Blocks only while the queue is full (back-pressure). Raises StoreClosed after close.
        """
        await self._enqueue(WriteOp(lambda db: fn(db, *args, **kwargs), _name_of(fn), None))

    async def read(self, fn: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(db, *args, **kwargs)`` on a read-only connection in a worker thread.

        Sees everything committed before it started. Raises fn's exception, or StoreClosed.
        Cancellation waits for fn to finish (SQLite calls cannot be abandoned safely).
        """
        if self._closed:
            raise StoreClosed("the store is closed")
        return await trio.to_thread.run_sync(
            self._run_read, lambda db: fn(db, *args, **kwargs), limiter=self._read_limiter
        )

    def statistics(self) -> StoreStatistics:
        """Write counters, for tests and the hub's metrics."""
        counters = self._counters
        queued = self._send.statistics().current_buffer_used
        return StoreStatistics(counters.batches, counters.ops, counters.failed_ops, queued)

    async def _enqueue(self, op: WriteOp) -> None:
        try:
            await self._send.send(op)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the store is closed") from None

    def _run_read(self, call: Callable[[Database], T]) -> T:
        db = self._readers.borrow()
        try:
            with db.atomic():  # one snapshot for every query fn makes
                return call(db)
        finally:
            self._readers.give_back(db)

    def _close(self) -> None:
        """Refuse new work; the writer drains what is queued."""
        self._closed = True
        self._send.close()


def copy_database(source: sqlite3.Connection, target: Path) -> None:
    """SQLite's online backup of ``source`` into a new file at ``target`` (in a worker thread)."""
    copied = sqlite3.connect(target)
    try:
        source.backup(copied)
    finally:
        copied.close()


def _name_of(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", repr(fn))


@asynccontextmanager
async def open_store(path: Path) -> AsyncIterator[Store]:
    """Open the database at ``path`` (migrating it) and run its writer until the block exits.

    On a normal exit every queued write is committed before this returns. If the block is
    cancelled, the batch in flight completes and ops still queued fail with StoreClosed.
    """
    path = Path(path)
    writer = _Writer(path, await trio.to_thread.run_sync(lambda: open_database(path, check_writable=True)))
    send, receive = trio.open_memory_channel[WriteOp](WRITE_QUEUE_SIZE)
    limiter = trio.CapacityLimiter(1)  # the writer's connection: one batch, or one copy, at a time

    async def copy(target: Path) -> None:
        await trio.to_thread.run_sync(copy_database, writer.db.conn, target, limiter=limiter)

    store = Store(path, send, WriteCounters(), copy)
    try:
        await trio.to_thread.run_sync(store._readers.open_ahead, READ_THREADS)
        body_error: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_writer, writer, receive, store._counters, store.health, limiter)
            try:
                yield store
            except Exception as exc:  # not handled: re-raised below, unwrapped from the nursery's group
                body_error = exc
            finally:
                store._close()
        if body_error is not None:
            raise body_error
    finally:
        fail_leftovers(receive)
        store._readers.close_all()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(writer.db.close)


@dataclass
class _Writer:
    """The writer's connection, opened again after a write found it read-only: SQLite keeps a
    connection read-only once it opened the file so, and the store must write again, without a
    restart, once the file is writable again."""

    path: Path
    db: Database

    def reopen_if_read_only(self, results: list[outcome.Outcome[Any]]) -> None:
        """In the writer's thread, after a batch."""
        if not any(isinstance(r, outcome.Error) and is_read_only_error(r.error) for r in results):
            return
        try:
            fresh = open_database(self.path)
        except sqlite3.Error as exc:
            logger.warning("the hub's database is read-only, and opening it again failed: %s", exc)
            return
        self.db.close()
        self.db = fresh


async def _run_writer(
    writer: _Writer,
    receive: trio.MemoryReceiveChannel[WriteOp],
    counters: WriteCounters,
    health: WriteHealth,
    limiter: trio.CapacityLimiter,
) -> None:
    """Take batches off the queue and commit them, until the queue is closed and empty.

    Cancelled, it fails what is still queued, and what is queued after, at once: a caller
    waiting shielded for its write (the audit's last flush) would otherwise wait forever.
    """
    try:
        async for first in receive:
            batch = take_batch(first, receive)
            # A thread cannot be abandoned mid-transaction anyway; shielding means the batch's
            # callers always hear how it ended, even when the store is being cancelled.
            with trio.CancelScope(shield=True):
                changes = writer.db.conn.total_changes  # the writer's thread is idle between batches
                results = await trio.to_thread.run_sync(commit_batch, writer.db, batch, limiter=limiter)
                wrote = writer.db.conn.total_changes > changes  # a change made, kept unless a result says not
                await trio.to_thread.run_sync(writer.reopen_if_read_only, results, limiter=limiter)
            health.batch_done(results, wrote)  # before the callers wake: what they answer, /health says too
            deliver(batch, results, counters)
    finally:
        fail_leftovers(receive)  # and close it: a later write raises StoreClosed instead of queueing

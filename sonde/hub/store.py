"""The async face of the hub's database: one writer task with group commit, threaded readers.

How it works. ``write`` and ``submit`` put an op (a plain function of the database) on a
bounded channel. One writer task takes up to MAX_BATCH_OPS queued ops and runs them in a
worker thread inside one ``BEGIN IMMEDIATE`` transaction, each op under its own SAVEPOINT
so a failing op is rolled back alone; one COMMIT then covers the batch (group commit) and
the waiting callers are woken with their op's result or exception. ``read`` runs a
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

Memory bound: at most WRITE_QUEUE_SIZE queued ops plus one batch in flight.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import outcome
import trio
from sqlite_utils import Database

from sonde.hub.db import BUSY_TIMEOUT_MS, open_database, open_read_database
from sonde.hub.db_errors import is_read_only_error

WRITE_QUEUE_SIZE = 1024
MAX_BATCH_OPS = 256
READ_THREADS = 4
LOCK_ERROR_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
LOCK_WAIT_S = BUSY_TIMEOUT_MS / 1000  # an op's wait for another process's write lock, from when it was queued
LOCK_WAIT_SLACK_S = 0.01  # an op with less left than this has waited its time
# even an op that used its time up in the queue waits this long (the hub's own audit prune
# holds the lock for tens of milliseconds at a time), and no longer
LOCK_WAIT_MIN_S = 0.1
LOCKED_WARNING_EVERY_S = 60.0

P = ParamSpec("P")
T = TypeVar("T")

logger = logging.getLogger(__name__)


class StoreClosed(RuntimeError):
    """The store is closed (or closing) and takes no more work."""


class StoreCommitFailed(RuntimeError):
    """The transaction holding this op could not begin or commit; the op was not saved."""

    @property
    def locked(self) -> bool:
        """Whether another connection held the database's write lock past the busy timeout."""
        cause = self.__cause__
        return isinstance(cause, sqlite3.Error) and cause.sqlite_errorcode in LOCK_ERROR_CODES

    @property
    def cause(self) -> str:
        """SQLite's own words for the failure."""
        return str(self.__cause__ or self)


@dataclass(frozen=True)
class StoreStatistics:
    """Counters since the store opened: ``batches`` is the number of write transactions."""

    batches: int
    ops: int
    failed_ops: int
    queued_ops: int


@dataclass
class _Counters:
    batches: int = 0
    ops: int = 0
    failed_ops: int = 0
    locked_warned_at: float | None = None  # time.monotonic() of the last warning of a lock
    locked_unsaid: int = 0  # queued ops failed on a lock since that warning, logged at debug


def _lock_deadline() -> float:
    return time.monotonic() + LOCK_WAIT_S


@dataclass(eq=False)
class _WriteOp:
    call: Callable[[Database], Any]
    name: str
    done: trio.Event | None  # None for submit(): nobody waits, failures are logged
    result: outcome.Outcome[Any] | None = None
    deadline: float = field(default_factory=_lock_deadline)  # time.monotonic(): the end of its lock wait


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

    def __init__(self, path: Path, send: trio.MemorySendChannel[_WriteOp], counters: _Counters) -> None:
        self.path = path
        self._send = send
        self._counters = counters
        self._readers = _ReadConnections(path)
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self._closed = False

    async def write(self, fn: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(db, *args, **kwargs)`` in the writer and wait until its batch is committed.

        Returns fn's result or raises fn's exception (fn's changes are then rolled back,
        its batch-mates are not). Raises StoreClosed after close, StoreCommitFailed if the
        batch could not commit. Cancelled while waiting, the op may still be committed.
        """
        done = trio.Event()
        op = _WriteOp(lambda db: fn(db, *args, **kwargs), _name_of(fn), done)
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
        await self._enqueue(_WriteOp(lambda db: fn(db, *args, **kwargs), _name_of(fn), None))

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

    async def _enqueue(self, op: _WriteOp) -> None:
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
    send, receive = trio.open_memory_channel[_WriteOp](WRITE_QUEUE_SIZE)
    store = Store(path, send, _Counters())
    try:
        body_error: Exception | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_writer, writer, receive, store._counters)
            try:
                yield store
            except Exception as exc:  # not handled: re-raised below, unwrapped from the nursery's group
                body_error = exc
            finally:
                store._close()
        if body_error is not None:
            raise body_error
    finally:
        _fail_leftovers(receive)
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
    writer: _Writer, receive: trio.MemoryReceiveChannel[_WriteOp], counters: _Counters
) -> None:
    """Take batches off the queue and commit them, until the queue is closed and empty."""
    limiter = trio.CapacityLimiter(1)
    async for first in receive:
        batch = _take_batch(first, receive)
        # A thread cannot be abandoned mid-transaction anyway; shielding means the batch's
        # callers always hear how it ended, even when the store is being cancelled.
        with trio.CancelScope(shield=True):
            results = await trio.to_thread.run_sync(_commit_batch, writer.db, batch, limiter=limiter)
            await trio.to_thread.run_sync(writer.reopen_if_read_only, results, limiter=limiter)
        _deliver(batch, results, counters)


def _take_batch(first: _WriteOp, receive: trio.MemoryReceiveChannel[_WriteOp]) -> list[_WriteOp]:
    batch = [first]
    while len(batch) < MAX_BATCH_OPS:
        try:
            batch.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return batch


def _commit_batch(db: Database, batch: list[_WriteOp]) -> list[outcome.Outcome[Any]]:
    """Run one batch in one transaction (in a worker thread)."""
    failed: dict[_WriteOp, outcome.Outcome[Any]] = {}
    ready = _begin(db, batch, failed)
    results: dict[_WriteOp, outcome.Outcome[Any]] = {}
    for op in ready:
        results[op] = _run_op(db, op)
        if not db.conn.in_transaction:
            # SQLite rolled the whole transaction back (a full disk or an I/O error can): the ops
            # run so far are undone too, and the rest would run outside any transaction. None of
            # the batch was written, so each is told so.
            cause = _transaction_lost(results[op])
            return [failed[each] if each in failed else _commit_failed(cause) for each in batch]
    if ready:
        try:
            db.commit()
        except sqlite3.Error as exc:
            db.rollback()
            results = {op: _commit_failed(exc) for op in ready}
    return [failed[op] if op in failed else results[op] for op in batch]


def _begin(
    db: Database, batch: list[_WriteOp], failed: dict[_WriteOp, outcome.Outcome[Any]]
) -> list[_WriteOp]:
    """BEGIN IMMEDIATE, waiting for another process's write lock only as long as the batch's ops
    have left; an op whose time is up fails (into ``failed``), the others wait on. Returns the
    ops to run in the transaction begun (none: no transaction)."""
    waiting = batch
    while waiting:
        left_s = max(min(op.deadline for op in waiting) - time.monotonic(), LOCK_WAIT_MIN_S)
        db.conn.execute(f"PRAGMA busy_timeout={math.ceil(left_s * 1000)}")
        try:
            db.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            locked = exc.sqlite_errorcode in LOCK_ERROR_CODES
            now = time.monotonic()
            for op in waiting:
                if not locked or op.deadline - now < LOCK_WAIT_SLACK_S:
                    failed[op] = _commit_failed(exc)
            waiting = [op for op in waiting if op not in failed]
        else:
            return waiting
    return []


def _run_op(db: Database, op: _WriteOp) -> outcome.Outcome[Any]:
    # The supervision boundary of one op: whatever it raises goes back to its caller.
    db.conn.execute("SAVEPOINT store_op")
    result: outcome.Outcome[Any] = outcome.capture(op.call, db)
    if db.conn.in_transaction and isinstance(result, outcome.Error):
        db.conn.execute("ROLLBACK TO store_op")
    if db.conn.in_transaction:
        db.conn.execute("RELEASE store_op")
    return result


def _transaction_lost(result: outcome.Outcome[Any]) -> sqlite3.Error:
    """The error that ended a batch's transaction: the op's own, when SQLite's (or it said
    SQLite's, as `StoreCommitFailed` from an op that writes its own way)."""
    error = result.error if isinstance(result, outcome.Error) else None
    for said in (error, error.__cause__ if error is not None else None):
        if isinstance(said, sqlite3.Error):
            return said
    return sqlite3.OperationalError("SQLite rolled back the transaction")


def _commit_failed(exc: sqlite3.Error) -> outcome.Error:
    error = StoreCommitFailed(f"the write transaction failed: {exc}")
    error.__cause__ = exc
    return outcome.Error(error)


def _deliver(batch: list[_WriteOp], results: list[outcome.Outcome[Any]], counters: _Counters) -> None:
    counters.batches += 1
    counters.ops += len(batch)
    for op, result in zip(batch, results, strict=True):
        if isinstance(result, outcome.Error):
            counters.failed_ops += 1
            if op.done is None:  # nobody waits for it: say it here
                _log_failed(op, result.error, counters)
        if op.done is not None:
            op.result = result
            op.done.set()


def _log_failed(op: _WriteOp, error: BaseException, counters: _Counters) -> None:
    """A queued op nobody waits for failed: an error, with its traceback if it is a bug; one
    that found the database locked by another process is no fault of the hub's, and is
    warned about at most every LOCKED_WARNING_EVERY_S (the others at debug)."""
    if not (isinstance(error, StoreCommitFailed) and error.locked):
        trace = None if isinstance(error, StoreCommitFailed) else error  # a full disk is no bug
        logger.error("store op %s failed: %s", op.name, error, exc_info=trace)
        return
    now = time.monotonic()
    if counters.locked_warned_at is not None and now - counters.locked_warned_at < LOCKED_WARNING_EVERY_S:
        counters.locked_unsaid += 1
        logger.debug("store op %s not saved: %s", op.name, error.cause)
        return
    more = (
        f" (and {counters.locked_unsaid} more since the last such warning)" if counters.locked_unsaid else ""
    )
    counters.locked_warned_at, counters.locked_unsaid = now, 0
    logger.warning(
        "store op %s not saved%s: another process held the database's write lock past the hub's %g s wait (%s)",
        op.name,
        more,
        LOCK_WAIT_S,
        error.cause,
    )


def _fail_leftovers(receive: trio.MemoryReceiveChannel[_WriteOp]) -> None:
    """Ops still queued when the writer stopped early (cancelled): fail their callers."""
    while True:
        try:
            op = receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            break
        if op.done is not None:
            op.result = outcome.Error(StoreClosed("the store closed before this write ran"))
            op.done.set()
    receive.close()

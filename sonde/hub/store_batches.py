"""One batch of the store's writes in one transaction (`sonde.hub.store` queues and runs them).

A batch is BEGIN IMMEDIATE, each op under its own SAVEPOINT (a failing op is rolled back
alone), one COMMIT. The BEGIN waits for another process's write lock only as long as the
batch's ops have left of LOCK_WAIT_S; an op whose time is up fails (`StoreCommitFailed`,
``locked``) while the others wait on. A transaction SQLite rolls back whole (a full disk,
an I/O error) fails the whole batch. Every op's outcome goes back to its caller; one
nobody waits for is logged instead (a lock at most every LOCKED_WARNING_EVERY_S).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import outcome
import trio
from sqlite_utils import Database

from sonde.hub.db import BUSY_TIMEOUT_MS

# Logged as the store's: an operator reads these as the store's lines, whatever module runs them.
logger = logging.getLogger("sonde.hub.store")

MAX_BATCH_OPS = 256
LOCK_ERROR_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
LOCK_WAIT_S = BUSY_TIMEOUT_MS / 1000  # an op's wait for another process's write lock, from when it was queued
LOCK_WAIT_SLACK_S = 0.01  # an op with less left than this has waited its time
# even an op that used its time up in the queue waits this long (the hub's own audit prune
# holds the lock for tens of milliseconds at a time), and no longer
LOCK_WAIT_MIN_S = 0.1
LOCKED_WARNING_EVERY_S = 60.0


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


@dataclass
class WriteCounters:
    batches: int = 0
    ops: int = 0
    failed_ops: int = 0
    locked_warned_at: float | None = None  # time.monotonic() of the last warning of a lock
    locked_unsaid: int = 0  # queued ops failed on a lock since that warning, logged at debug


def lock_deadline() -> float:
    return time.monotonic() + LOCK_WAIT_S


@dataclass(eq=False)
class WriteOp:
    call: Callable[[Database], Any]
    name: str
    done: trio.Event | None  # None for submit(): nobody waits, failures are logged
    result: outcome.Outcome[Any] | None = None
    deadline: float = field(default_factory=lock_deadline)  # time.monotonic(): the end of its lock wait


def take_batch(first: WriteOp, receive: trio.MemoryReceiveChannel[WriteOp]) -> list[WriteOp]:
    batch = [first]
    while len(batch) < MAX_BATCH_OPS:
        try:
            batch.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            break
    return batch


def commit_batch(db: Database, batch: list[WriteOp]) -> list[outcome.Outcome[Any]]:
    """Run one batch in one transaction (in a worker thread)."""
    failed: dict[WriteOp, outcome.Outcome[Any]] = {}
    ready = _begin(db, batch, failed)
    results: dict[WriteOp, outcome.Outcome[Any]] = {}
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


def _begin(db: Database, batch: list[WriteOp], failed: dict[WriteOp, outcome.Outcome[Any]]) -> list[WriteOp]:
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


def _run_op(db: Database, op: WriteOp) -> outcome.Outcome[Any]:
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


def deliver(batch: list[WriteOp], results: list[outcome.Outcome[Any]], counters: WriteCounters) -> None:
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


def _log_failed(op: WriteOp, error: BaseException, counters: WriteCounters) -> None:
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


def fail_leftovers(receive: trio.MemoryReceiveChannel[WriteOp]) -> None:
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

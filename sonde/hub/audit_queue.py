"""Audit entries on their way to the chain: many entries, one store op, none lost to a write failure.

A fan-out writes one audit row per probe, thousands a second. Queued as one
store op each, every row paid for its own savepoint, its own read of the chain
head and its own head update. Here entries collect in a list, and `run` (the
flusher, a task of the hub) writes them `LINGER_S` after the first, with one
`append_many` (one head read, one head update). Entries keep their order: one
write of entries is in flight at a time, and the chain is the same as if they
had been appended one by one. The linger is what batches sequential calls too:
without it every probe paid a worker-thread hop and a transaction of its own
(measured: a quarter of the hub's CPU per sequential probe).

A change made through the hub (an API key created, an agent removed) must not be parted
from its entry by a crash, as it could be while the entry waited here: `write_with` runs the
change's store op and appends its entry in the same transaction, after the entries waiting
(taken into that write, so the chain keeps the order and the times of the entries).

Nothing waits for the commit (group commit), except when more than
`MAX_PENDING` entries are waiting: then the caller waits for a write
(back-pressure, so the list stays bounded). Readers of the audit trail call
`flush` first, so they see every entry appended before they asked. When the
flusher stops (the hub shuts down), it writes what is left. A batch holding an
entry that cannot be encoded (a NaN in a detail) is retried one entry at a
time, so only that entry is lost, and logged.

When the database cannot be written (disk full, an I/O error), the entries stay
in memory, first in line, and the flusher tries again every `RETRY_S`;
`failure` says why meanwhile, and the hub refuses calls while it is set (every
call must be on the record). Past `MAX_PENDING` entries kept, further ones
(agent connections, failed logins: no call runs meanwhile) are counted, not
kept, and the first write that works appends an ``audit.gap`` entry saying how
many were lost and since when.

Entries that callers without credentials can cause at will (failed logins,
refused enrollments and agent connections) come through `append_unauthenticated`
and draw on a hub-wide budget (`sonde.hub.audit_budget`): past it they are
counted, and the counts go on the chain as an ``audit.suppressed`` entry.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import outcome
import trio
from sqlite_utils import Database

from sonde.hub.audit import AuditEntry, append_audit, append_many
from sonde.hub.audit_budget import UnauthenticatedBudget
from sonde.hub.audit_leftovers import save_leftovers
from sonde.hub.db import write_transaction
from sonde.hub.db_errors import LASTING_FAILURE_CODES, LOCK_CODES, primary_code_in
from sonde.hub.errors import is_damaged_database
from sonde.hub.store import Store, StoreClosed, StoreCommitFailed

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_PENDING = 10_000
LINGER_S = 0.05
RETRY_S = 1.0
GAP_ACTION = "audit.gap"


class AuditUnavailable(RuntimeError):
    """The audit chain cannot be written just now; the entries wait in memory."""


class AuditQueue:
    def __init__(
        self,
        store: Store,
        max_pending: int = MAX_PENDING,
        linger_s: float = LINGER_S,
        retry_s: float = RETRY_S,
        budget: UnauthenticatedBudget | None = None,
    ) -> None:
        self._store = store
        self._max_pending = max_pending
        self._linger_s = linger_s
        self._retry_s = retry_s
        self._pending: list[AuditEntry] = []
        self._writing = trio.Lock()  # one write of entries at a time: the chain keeps their order
        self._wanted = trio.Event()  # set by entries waiting for the flusher
        self.failure: str | None = None  # why the last write failed; None while writes work
        self._failure_locked = False  # that was another process holding the database's write lock
        self._failure_damaged = False  # that was SQLite finding the database file damaged
        self._failing_since = 0.0
        self._dropped = 0  # entries not kept while failing, past the bound
        self._dropping_since = 0.0
        self._budget = budget or UnauthenticatedBudget()

    async def append_unauthenticated(self, entry: AuditEntry) -> None:
        """`append` an entry no credential vouches for, if the budget admits it; else it is counted."""
        if self._budget.admit(entry):
            await self.append(entry)

    async def append(self, entry: AuditEntry) -> None:
        if self.failure is not None and len(self._pending) >= self._max_pending:
            if not self._dropped:  # memory stays bounded; the gap goes on the chain later
                self._dropping_since = time.time()
            self._dropped += 1
            return
        self._pending.append(entry)
        self._wanted.set()
        if len(self._pending) >= self._max_pending and self.failure is None:
            try:
                await self._write_pending()  # back-pressure
            except AuditUnavailable:
                pass  # kept in memory; the flusher tries again

    def refusal(self) -> str | None:
        """What a caller is told while the audit log cannot be written; None while it can."""
        if self.failure is None:
            return None
        if self._failure_damaged:
            fix = (
                "The database file is damaged: an operator must stop the hub, restore sonde.db from a backup "
                "and run `sonde hub audit verify`."
            )
        elif self._failure_locked:
            fix = (
                "Another process holds the write lock of the hub's sonde.db (a backup, an sqlite3 shell "
                "in a transaction): calls are served again by themselves once it lets go."
            )
        else:
            fix = (
                "An operator must fix that (often: free disk space where the hub keeps sonde.db, or make "
                "it writable again if it became read-only); calls are served again by themselves."
            )
        return (
            f"The hub cannot write its audit log ({self.failure}), and every call must be on the record, "
            f"so it refuses calls until it can. {fix}"
        )

    async def flush(self) -> None:
        """Commit every entry appended so far; raises `AuditUnavailable` if it cannot."""
        await self._write_pending()

    def _save_leftovers(self) -> None:
        """Keep the entries the hub stops without writing in a file, and say where (`save_leftovers`)."""
        saved, refused = save_leftovers(self._pending, self._store.path)
        count = len(self._pending)
        if saved is None:
            log.error(
                "%d audit entries were not written before the hub stopped, nor saved (%s)",
                count,
                "; ".join(refused),
            )
            return
        log.error(
            "%d audit entries were not written before the hub stopped (%s): they are saved, as JSON lines, in "
            "%s; keep that file with the audit log (they are not on its hash chain)",
            count,
            self.failure or "the store stopped",
            saved,
        )

    async def run(self) -> None:
        """The flusher: one write per `LINGER_S` at most, retried every `RETRY_S` while failing."""
        try:
            while True:
                with trio.move_on_after(self._budget.due_in()):  # a summary of suppressed entries is due
                    await self._wanted.wait()
                await trio.sleep(self._linger_s)
                self._wanted = trio.Event()  # entries after this point wake the next round
                try:
                    await self._write_pending()
                except AuditUnavailable:
                    await trio.sleep(self._retry_s)
                    self._wanted.set()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._write_pending(final=True)
                except (AuditUnavailable, StoreClosed):  # the store was cancelled with the hub
                    self._save_leftovers()

    async def write_with(
        self, change: Callable[[Database], T], entry_for: Callable[[T], AuditEntry | None]
    ) -> T:
        """Run the store op ``change`` and append ``entry_for(its result)`` in the same transaction,
        after every entry appended before it: the change and its entry commit together or not at all.

        The entry is timed when its write begins (its ``ts`` is replaced), so the chain stays in
        the order of time. Returns what ``change`` returns, or raises what it raises (neither it
        nor its entry is then written; the entries before it are). Raises `StoreCommitFailed` if
        the database did not take the write (locked, full, damaged): nothing was written, and the
        entries before it are the flusher's again. Cancelled, it waits for the outcome (shielded).
        """
        async with self._writing:
            taken = self._take(final=False)
            begun = time.time()
            try:
                with trio.CancelScope(shield=True):  # the outcome must be known: keep the entries or not
                    done = await self._store.write(
                        _append_with_change, taken.entries, change, entry_for, begun
                    )
            except (StoreCommitFailed, sqlite3.Error):
                self._pending[:0] = taken.pending
                self._wanted.set()  # the flusher tries them again, and says so if it cannot
                raise
            self._taken_written(taken)
        return done.unwrap()

    async def _write_pending(self, final: bool = False) -> None:
        async with self._writing:
            taken = self._take(final)
            if not taken.entries:
                return
            try:
                with trio.CancelScope(shield=True):  # the outcome must be known: keep the entries or not
                    await self._store.write(_append_entries, taken.entries)
            except StoreClosed:  # cancelled with the hub: the entries are still to write, and counted
                self._pending[:0] = taken.pending
                raise
            except (StoreCommitFailed, sqlite3.Error) as exc:
                self._pending[:0] = taken.pending
                self._failed(exc)
                raise AuditUnavailable(self.failure) from exc
            self._taken_written(taken)

    def _take(self, final: bool) -> _Taken:
        """The entries of the next write (under ``_writing``): the pending ones, then a gap and a
        summary if due (made afresh if this write fails)."""
        pending, self._pending = self._pending, []
        gap = self._gap_entry() if self._dropped else None
        return _Taken(pending, gap, self._budget.summary(final))

    def _taken_written(self, taken: _Taken) -> None:
        if taken.summary is not None:
            self._budget.written()
        self._written(len(taken.pending) + (taken.gap is not None))

    def _gap_entry(self) -> AuditEntry:
        return AuditEntry(
            actor="hub",
            action=GAP_ACTION,
            target=None,
            outcome="lost",
            detail={"lost": self._dropped, "since": self._dropping_since, "reason": self.failure},
        )

    def _failed(self, exc: BaseException) -> None:
        cause = exc.__cause__ if isinstance(exc, StoreCommitFailed) and exc.__cause__ else exc
        if self.failure is None:
            self._failing_since = time.time()
            log.error(
                "cannot write the audit log (%s): calls are refused until it can be written; "
                "%d entries wait in memory, retried every %gs",
                cause,
                len(self._pending),
                self._retry_s,
            )
        self.failure = str(cause)
        self._failure_locked = isinstance(exc, StoreCommitFailed) and exc.locked
        self._failure_damaged = is_damaged_database(cause)

    def _written(self, count: int) -> None:
        if self.failure is None:
            return
        log.warning(
            "the audit log is written again after %.0fs: %d entries written, %d lost; calls are served again",
            time.time() - self._failing_since,
            count,
            self._dropped,
        )
        self.failure = None
        self._dropped = 0


@dataclass(frozen=True)
class _Taken:
    """What one write of the queue's takes: the pending entries, and a gap and a summary if due."""

    pending: list[AuditEntry]
    gap: AuditEntry | None
    summary: AuditEntry | None

    @property
    def entries(self) -> list[AuditEntry]:
        return self.pending + [e for e in (self.gap, self.summary) if e is not None]


class UnwritableEntry(RuntimeError):
    """The entry of a change cannot be encoded (a NaN in its detail): a bug; the change is not made."""


def _append_with_change(
    db: Database,
    entries: list[AuditEntry],
    change: Callable[[Database], T],
    entry_for: Callable[[T], AuditEntry | None],
    ts: float,
) -> outcome.Outcome[T]:
    """In the writer thread: append ``entries``, then run ``change`` and append its entry, in a
    savepoint of their own: a change that raises loses only itself (its outcome is returned).

    Raises `StoreCommitFailed` when the database failed the write (a full disk, an I/O error, a
    damaged file), whichever statement it failed: nothing of this write then stays."""
    try:
        if entries:
            _append_entries(db, entries)
    except sqlite3.Error as exc:
        raise _write_failed(exc) from exc
    result = outcome.capture(_change_and_entry, db, change, entry_for, ts)
    if isinstance(result, outcome.Error) and isinstance(result.error, sqlite3.Error):
        if not db.conn.in_transaction or _database_failed(result.error):  # not the change's own refusal
            raise _write_failed(result.error) from result.error
    return result


def _database_failed(exc: sqlite3.Error) -> bool:
    """The database did not take a write, whatever was written: locked, or a lasting failure."""
    return primary_code_in(exc, LASTING_FAILURE_CODES | LOCK_CODES)


def _write_failed(exc: sqlite3.Error) -> StoreCommitFailed:
    """The error of a write the database failed midway, as the store says it of a failed commit."""
    error = StoreCommitFailed(f"the write transaction failed: {exc}")
    error.__cause__ = exc
    return error


def _change_and_entry(
    db: Database, change: Callable[[Database], T], entry_for: Callable[[T], AuditEntry | None], ts: float
) -> T:
    with write_transaction(db):  # nested: a savepoint, rolled back if anything here raises
        result = change(db)
        entry = entry_for(result)
        if entry is not None:
            try:
                append_audit(db, entry.model_copy(update={"ts": ts}))
            except ValueError as exc:
                raise UnwritableEntry(f"audit entry {entry.actor} {entry.action} not written: {exc}") from exc
    return result


def _append_entries(db: Database, entries: list[AuditEntry]) -> None:
    """In the writer thread: append ``entries`` in order; one that cannot be encoded loses only itself."""
    try:
        append_many(db, entries)  # all or nothing (a savepoint)
    except ValueError:
        for entry in entries:
            try:
                append_audit(db, entry)
            except ValueError as exc:
                log.error("audit entry %s %s not written: %s", entry.actor, entry.action, exc)

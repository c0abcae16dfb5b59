"""Audit entries on their way to the chain: many entries, one store op.

A fan-out writes one audit row per probe, thousands a second. Queued as one
store op each, every row paid for its own savepoint, its own read of the chain
head and its own head update. Here entries collect in a list, and `run` (the
flusher, a task of the hub) queues one store op for them `LINGER_S` after the
first: when the writer runs it, that op takes everything collected so far and
appends it with one `append_many` (one head read, one head update). Entries
keep their order, and the chain is the same as if they had been appended one
by one. The linger is what batches sequential calls too: without it every
probe paid a worker-thread hop and a transaction of its own (measured: a
quarter of the hub's CPU per sequential probe).

Nothing waits for the commit (group commit), except when more than
`MAX_PENDING` entries are waiting: then the caller waits for a flush
(back-pressure, so the list stays bounded). Readers of the audit trail call
`flush` first, so they see every entry appended before they asked. When the
flusher stops (the hub shuts down), it queues what is left. A batch holding
an entry that cannot be written (a NaN in a detail) is retried one entry at a
time, so only that entry is lost, and logged.
"""

from __future__ import annotations

import logging
import threading

import trio
from sqlite_utils import Database

from sonde.hub.audit import AuditEntry, append_audit, append_many
from sonde.hub.store import Store

log = logging.getLogger(__name__)
MAX_PENDING = 10_000
LINGER_S = 0.05


class AuditQueue:
    def __init__(self, store: Store, max_pending: int = MAX_PENDING, linger_s: float = LINGER_S) -> None:
        self._store = store
        self._max_pending = max_pending
        self._linger_s = linger_s
        self._lock = threading.Lock()  # the writer thread takes the list while trio appends
        self._pending: list[AuditEntry] = []
        self._flush_queued = False  # entries are waiting for a flush that has not taken them yet
        self._wanted = trio.Event()  # set by the first entry after a flush: wakes `run`

    async def append(self, entry: AuditEntry) -> None:
        with self._lock:
            self._pending.append(entry)
            wake = not self._flush_queued
            self._flush_queued = True
            full = len(self._pending) >= self._max_pending
        if full:
            await self._store.write(self._flush)
        elif wake:
            self._wanted.set()

    async def flush(self) -> None:
        """Commit every entry appended so far; returns once it is in the chain."""
        await self._store.write(self._flush)

    async def run(self) -> None:
        """The flusher: one store op per `LINGER_S` at most; queues what is left when cancelled."""
        try:
            while True:
                await self._wanted.wait()
                await trio.sleep(self._linger_s)
                self._wanted = trio.Event()  # entries after this point wake the next round
                await self._store.submit(self._flush)
        finally:
            if self._flush_queued:
                with trio.CancelScope(shield=True):
                    await self._store.submit(self._flush)

    def _flush(self, db: Database) -> None:
        """In the writer thread: append everything collected so far."""
        with self._lock:
            entries, self._pending = self._pending, []
            self._flush_queued = False
        if not entries:
            return
        try:
            append_many(db, entries)  # all or nothing (a savepoint)
        except ValueError:
            for entry in entries:
                try:
                    append_audit(db, entry)
                except ValueError as exc:
                    log.error("audit entry %s %s not written: %s", entry.actor, entry.action, exc)

"""Audit entries on their way to the chain: many entries, one store op.

A fan-out writes one audit row per probe, thousands a second. Queued as one
store op each, every row paid for its own savepoint, its own read of the chain
head and its own head update. Here entries collect in a list, and only the
first entry after a flush queues a store op: when the writer runs it, that op
takes everything collected so far and appends it with one `append_many`
(one head read, one head update). Entries keep their order, and the chain is
the same as if they had been appended one by one.

Nothing waits for the commit (as before: group commit), except when more than
`MAX_PENDING` entries are waiting: then the caller waits for a flush
(back-pressure, so the list stays bounded). A batch holding an entry that
cannot be written (a NaN in a detail) is retried one entry at a time, so only
that entry is lost, and logged.
"""

from __future__ import annotations

import logging
import threading

from sqlite_utils import Database

from sonde.hub.audit import AuditEntry, append_audit, append_many
from sonde.hub.store import Store

log = logging.getLogger(__name__)
MAX_PENDING = 10_000


class AuditQueue:
    def __init__(self, store: Store, max_pending: int = MAX_PENDING) -> None:
        self._store = store
        self._max_pending = max_pending
        self._lock = threading.Lock()  # the writer thread takes the list while trio appends
        self._pending: list[AuditEntry] = []
        self._flush_queued = False

    async def append(self, entry: AuditEntry) -> None:
        with self._lock:
            self._pending.append(entry)
            queue_flush = not self._flush_queued
            self._flush_queued = True
            full = len(self._pending) >= self._max_pending
        if full:
            await self._store.write(self._flush)
        elif queue_flush:
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

"""Whether the hub's database takes writes, whichever part of the hub wrote.

Every write of the hub goes through the store's one writer (`sonde.hub.store`): REST and
admin changes, the audit queue, an agent's status and last-seen time. After each batch
the writer tells `WriteHealth` how it went: a write SQLite refused for a reason that
lasts (a full disk, an I/O error, a read-only or damaged file) marks the database as
failing, from that first failure until a batch commits a change. Another process
holding the write lock is not such a reason: it passes by itself, and the store says so
on its own. ``GET /api/v1/health`` answers ``degraded`` while it fails, for monitoring.
The audit prune of ``--audit-keep`` writes on a connection of its own, beside the writer,
and tells `WriteHealth` the same (`sonde.hub.audit_retention`): a prune refused for a lasting
reason fails the database too, and a prune or a store write that commits clears it.

A hub nobody calls writes nothing, and would be said failing long after an operator freed
the disk: while failing, `retry_writes` writes a mark (the time, in ``meta``) every
`RETRY_S`, so the first write that works again is seen within that.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import outcome
import trio
from sqlite_utils import Database

from sonde.hub.db import set_meta
from sonde.hub.db_errors import LASTING_FAILURE_CODES, primary_code_in
from sonde.hub.store_batches import StoreClosed, StoreCommitFailed

if TYPE_CHECKING:
    from sonde.hub.store import Store

log = logging.getLogger("sonde.hub.store")  # an operator reads these as the store's lines

RETRY_S = 1.0
WRITE_CHECK_META = "write_checked_at"


def lasting_failure(error: BaseException) -> str | None:
    """SQLite's words when ``error`` is the database refusing a write for a reason that lasts;
    None for anything else (another process's lock, an op's own refusal, a bug)."""
    if isinstance(error, StoreCommitFailed):
        return None if error.locked else error.cause
    if primary_code_in(error, LASTING_FAILURE_CODES):
        return str(error)
    return None


def _store_refused(result: outcome.Outcome[Any]) -> bool:
    return isinstance(result, outcome.Error) and isinstance(result.error, StoreCommitFailed)


class WriteHealth:
    """Whether the database takes writes: `failure` (SQLite's words) from the first write it
    refused for a lasting reason until a write commits; None meanwhile it takes them."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self.failing_since: float | None = None  # time.time() of the first failure
        self._failing = trio.Event()  # set while failing; a fresh one once writes work again
        self._working = trio.Event()  # the other way round
        self._working.set()

    def batch_done(self, results: Sequence[outcome.Outcome[Any]], wrote: bool) -> None:
        """After a batch of the writer: its ops' outcomes, and whether it committed a change."""
        for result in results:
            if isinstance(result, outcome.Error) and (failure := lasting_failure(result.error)) is not None:
                self.write_failed(failure)
                return
        committed = any(not _store_refused(result) for result in results)  # a failed commit refuses all
        if wrote and committed:
            self.wrote()

    def wrote(self) -> None:
        """A write committed a change, the store's or one made beside it: the database takes writes."""
        if self.failure is None:
            return
        log.warning(
            "the hub's database takes writes again, after %.0f s; GET /api/v1/health answers ok",
            time.time() - (self.failing_since or time.time()),
        )
        self.failure = self.failing_since = None
        self._failing = trio.Event()
        self._working.set()

    def write_failed(self, failure: str) -> None:
        """A write was refused for a lasting reason (`lasting_failure`), the store's or one made
        beside its writer (the audit prune, on a connection of its own): ``failure`` says why."""
        if self.failure is None:
            self.failing_since = time.time()
            log.error(
                "the hub cannot write its database (%s): changes are refused and GET /api/v1/health "
                "answers degraded until a write works (often: free disk space where sonde.db is)",
                failure,
            )
            self._failing.set()
            self._working = trio.Event()
        self.failure = failure

    async def wait_failing(self) -> None:
        """Return once writes fail (at once while they do)."""
        await self._failing.wait()

    async def wait_working(self) -> None:
        """Return once writes work (at once while they do)."""
        await self._working.wait()


def mark_write_checked(db: Database) -> None:
    """A store op: a write that changes nothing of the hub's data, to find out whether writes work."""
    set_meta(db, WRITE_CHECK_META, repr(time.time()))


async def retry_writes(store: Store, retry_s: float = RETRY_S) -> None:
    """Until cancelled: while the store's writes fail, try one every ``retry_s`` (`mark_write_checked`),
    so that the hub sees the database take writes again even when nothing else writes."""
    while True:
        await store.health.wait_failing()
        await trio.sleep(retry_s)
        if store.health.failure is None:
            continue  # another write worked meanwhile
        try:
            await store.write(mark_write_checked)
        except StoreClosed:
            return
        except (StoreCommitFailed, sqlite3.Error):
            pass  # still failing: `WriteHealth` has it

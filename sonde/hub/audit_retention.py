"""`sonde hub --audit-keep AGE`: the hub prunes its own audit log, so it cannot fill the disk.

Every audited call adds a row (about 400 bytes; an MCP probe call two), so a busy hub
grows its database by gigabytes a day. With ``--audit-keep`` the hub runs the same
prune as `sonde hub audit prune --older-than AGE`, at start and then every
`CHECK_EVERY_S`, on its own connection in a worker thread: the chain is checked in
a read snapshot and rows are deleted in short writes, so calls are served meanwhile
(`sonde.hub.audit_prune`). The prune is an entry on the chain (actor ``hub``), and
the freed pages go back to the file system. A chain that does not verify is not
pruned (that would erase the evidence): the hub says so in its log each time. A row made
after the cutoff (its clock was wrong) stops the cut before older rows: the hub warns once
per such row, with the explanation `sonde hub audit prune` gives. A prune the database
refuses for a lasting reason (a full disk, an I/O error, a read-only or damaged file: what
fails the store's own writes) makes ``GET /api/v1/health`` answer ``degraded`` until a write
works again, a prune's or the store's (`sonde.hub.write_health`).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import trio

from sonde.hub.audit_prune import AuditPruned, kept_back_text, prune_and_give_back
from sonde.hub.db import open_database
from sonde.hub.utc_times import utc_text
from sonde.hub.write_health import WriteHealth, lasting_failure

log = logging.getLogger(__name__)

CHECK_EVERY_S = 3600.0
ACTOR = "hub"


def prune_older_than(db_path: Path, keep_s: float) -> tuple[AuditPruned, int | None]:
    """Prune the rows older than ``keep_s`` on a connection of its own; what was pruned, and
    the bytes given back to the file system."""
    db = open_database(db_path, existing=True)
    try:
        return prune_and_give_back(db, time.time() - keep_s, actor=ACTOR)
    finally:
        db.close()


async def keep_audit_for(
    db_path: Path, keep_s: float, health: WriteHealth | None = None, every_s: float = CHECK_EVERY_S
) -> None:
    """Until cancelled: prune the audit rows older than ``keep_s`` now, then every ``every_s``.
    ``health`` (the store's) hears of a prune refused for a lasting reason, and of one that wrote."""
    held_back = HeldBack()
    while True:
        try:
            pruned, given_back = await trio.to_thread.run_sync(prune_older_than, db_path, keep_s)
        except ValueError as exc:  # the chain does not verify
            log.error("audit retention: not pruning: %s; see `sonde hub audit verify`", exc)
        except sqlite3.Error as exc:  # locked for too long, the disk: the next round tries again
            log.warning("audit retention: could not prune this time (%s); trying again later", exc)
            failure = prune_failure(exc)
            if health is not None and failure is not None:
                health.write_failed(failure)
        else:
            report_pruned(pruned, given_back, keep_s)
            held_back.report(pruned, keep_s)
            if health is not None and (pruned.rows or pruned.finished):
                health.wrote()
        await trio.sleep(every_s)


def prune_failure(error: sqlite3.Error) -> str | None:
    """What /health says of a prune that failed with ``error``, when the database refused it for
    a reason that lasts (`lasting_failure`, of ``error`` or, once `sonde.hub.db` worded it, of
    its cause): SQLite's words, naming the prune; None for anything else (another process's lock)."""
    for said in (error, error.__cause__):
        if said is not None and (words := lasting_failure(said)) is not None:
            return f"pruning the audit log (--audit-keep): {words}"
    return None


def report_pruned(pruned: AuditPruned, given_back: int | None, keep_s: float) -> None:
    """Log what a round pruned, if anything."""
    if pruned.rows or pruned.finished:
        freed = f"{given_back / 2**20:.1f} MiB given back" if given_back is not None else "space kept"
        log.info(
            "audit retention: pruned %d audit rows older than %s (through row %d; %s)",
            pruned.rows + pruned.finished,
            _days(keep_s),
            pruned.through_seq,
            freed,
        )


class HeldBack:
    """Says when a row made after the cutoff holds older rows back (a row written while the
    clock was wrong: the log is cut only from its start): a warning once per such row, as
    `sonde hub audit prune` explains it, then a debug line each round it still does.
    """

    def __init__(self) -> None:
        self.warned_seq: int | None = None  # the row last warned about

    def report(self, pruned: AuditPruned, keep_s: float) -> None:
        if not pruned.older_kept or pruned.newer_seq is None:
            self.warned_seq = None  # it was pruned at last: warn anew if it happens again
            return
        level = logging.DEBUG if pruned.newer_seq == self.warned_seq else logging.WARNING
        self.warned_seq = pruned.newer_seq
        log.log(level, "audit retention: %s", held_back_message(pruned, keep_s))


def held_back_message(pruned: AuditPruned, keep_s: float) -> str:
    """Why rows older than the cutoff were kept, in the words of `sonde hub audit prune`, and until when."""
    cut = (
        f"pruned through row {pruned.through_seq} only"
        if pruned.rows
        else f"no audit rows pruned: the log starts with a row made after the cutoff ({_days(keep_s)} ago)"
    )
    until = utc_text(pruned.newer_ts + keep_s) if pruned.newer_ts is not None else "?"
    return f"{cut}; {kept_back_text(pruned)}; they stay until that row is {_days(keep_s)} old ({until})"


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g} days"

"""`sonde hub --audit-keep AGE`: the hub prunes its own audit log, so it cannot fill the disk.

Every audited call adds a row (about 400 bytes; an MCP probe call two), so a busy hub
grows its database by gigabytes a day. With ``--audit-keep`` the hub runs the same
prune as `sonde hub audit prune --older-than AGE`, at start and then every
`CHECK_EVERY_S`, on its own connection in a worker thread: the chain is checked in
a read snapshot and rows are deleted in short writes, so calls are served meanwhile
(`sonde.hub.audit_prune`). The prune is an entry on the chain (actor ``hub``), and
the freed pages go back to the file system. A chain that does not verify is not
pruned (that would erase the evidence): the hub says so in its log each time.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import trio

from sonde.hub.audit_prune import AuditPruned, prune_and_give_back
from sonde.hub.db import open_database

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


async def keep_audit_for(db_path: Path, keep_s: float, every_s: float = CHECK_EVERY_S) -> None:
    """Until cancelled: prune the audit rows older than ``keep_s`` now, then every ``every_s``."""
    while True:
        try:
            pruned, given_back = await trio.to_thread.run_sync(prune_older_than, db_path, keep_s)
        except ValueError as exc:  # the chain does not verify
            log.error("audit retention: not pruning: %s; see `sonde hub audit verify`", exc)
        except sqlite3.Error as exc:  # locked for too long, the disk: the next round tries again
            log.warning("audit retention: could not prune this time (%s); trying again later", exc)
        else:
            if pruned.rows or pruned.finished:
                freed = f"{given_back / 2**20:.1f} MiB given back" if given_back is not None else "space kept"
                log.info(
                    "audit retention: pruned %d audit rows older than %s (through row %d; %s)",
                    pruned.rows + pruned.finished,
                    _days(keep_s),
                    pruned.through_seq,
                    freed,
                )
        await trio.sleep(every_s)


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g} days"

"""Hub admin actions on the audit log (`sonde hub audit verify|prune`).

`audit_verify` only reads the database, so a backup copy or a read-only mount will do, and
its exit code tells a broken chain from one that could not be checked. `audit_prune` cuts
rows from the start of the log in short batches while a running hub goes on writing. Reading
the rows (`sonde hub audit list`) is `sonde.hub.admin_audit_list`'s.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sonde.hub.admin import NoHubDatabase, err, existing_database, open_hub_database
from sonde.hub.audit import AuditVerification, verify_audit
from sonde.hub.audit_prune import MIN_PRUNE_AGE_S, AuditPruned, kept_back_text, prune_and_give_back
from sonde.hub.db import SCHEMA_VERSION, open_database_read_only, schema_version
from sonde.hub.db_errors import DatabaseUnusable, database_error
from sonde.hub.durations import parse_duration, read_as_seconds
from sonde.hub.utc_times import utc_text

# `sonde hub audit verify` exits with: 0 the chain is intact, 1 it is broken (an edit, a cut),
# 3 it could not be checked (no database, unreadable, too new); 2 is a usage error.
VERIFY_INTACT, VERIFY_BROKEN, VERIFY_UNCHECKED = 0, 1, 3


def audit_verify(data_dir: Path) -> int:
    """Check the audit chain, only reading the database (a backup copy, a read-only mount, a
    running hub's); the exit code tells a broken chain from one that could not be checked."""
    try:
        db = open_database_read_only(existing_database(data_dir))
        try:
            version = schema_version(db)
            report = verify_audit(db)
        finally:
            db.close()
    except (NoHubDatabase, DatabaseUnusable) as exc:
        err(f"sonde hub: the audit chain was not checked: {exc}")
        return VERIFY_UNCHECKED
    except sqlite3.Error as exc:  # found reading it: a damaged file is said as the open says it
        explained = database_error(data_dir / "sonde.db", exc)
        err(f"sonde hub: the audit chain was not checked: {explained}")
        return VERIFY_UNCHECKED
    if version < SCHEMA_VERSION:
        err(
            f"(schema version {version}, older than this Sonde's {SCHEMA_VERSION}: read as it is, not upgraded)"
        )
    if not report.ok:
        err(f"audit chain BROKEN at seq {report.first_bad_seq}: {report.problem}")
        return VERIFY_BROKEN
    err(_intact(report))
    return VERIFY_INTACT


def _intact(report: AuditVerification) -> str:
    if report.rows == report.starts_after == report.awaiting_deletion == 0:
        return (
            "audit chain intact: the log is empty. Nothing in the database shows rows were ever "
            "written; the chain has no secret key, so whoever can write the database could also "
            "have removed every trace of them"
        )
    pruned = f" (rows up to {report.starts_after} were pruned)" if report.starts_after else ""
    waiting = (
        f"; {report.awaiting_deletion} pruned rows still wait to be deleted (a prune was "
        "interrupted: run `sonde hub audit prune` again)"
        if report.awaiting_deletion
        else ""
    )
    return f"audit chain intact: {report.rows} rows verified{pruned}{waiting}"


PROGRESS_EVERY_S = 2.0  # a long prune says how far it is at most this often


def audit_prune(data_dir: Path, older_than: str) -> int:
    """Delete the audit rows older than ``older_than`` (at least a day) at the start of the log;
    the rest still verifies. A running hub goes on writing meanwhile."""
    try:
        age_s = parse_duration(older_than)
    except ValueError as exc:
        err(f"sonde hub: --older-than: {exc}")
        return 2
    if age_s < MIN_PRUNE_AGE_S:
        err(
            f"sonde hub: --older-than must be at least 1d (got {older_than}{read_as_seconds(older_than)}): "
            "recent rows are what an audit is for"
        )
        return 2
    before = time.time() - age_s
    db = open_hub_database(data_dir)
    try:
        pruned, given_back = prune_and_give_back(db, before, progress=ProgressLine())
    except ValueError as exc:
        err(f"not pruning: {exc}; see `sonde hub audit verify`")
        return 1
    finally:
        db.close()
    err(_pruned_message(pruned, utc_text(before), given_back))
    return 0


class ProgressLine:
    """Says on stderr how far a prune is, at most every `PROGRESS_EVERY_S` (a short one says nothing)."""

    def __init__(self) -> None:
        self.next_at = time.monotonic() + PROGRESS_EVERY_S

    def __call__(self, phase: str, done: int, total: int) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + PROGRESS_EVERY_S
        doing = "checking the chain" if phase == "check" else "deleting"
        err(f"audit prune: {doing}: {done} of {total} rows")


def _pruned_message(pruned: AuditPruned, cutoff: str, given_back: int | None) -> str:
    """What a prune did, truthfully: it cuts only from the start of the log."""
    parts: list[str] = []
    if pruned.rows:
        parts.append(
            f"pruned {pruned.rows} audit rows older than {cutoff} (through row {pruned.through_seq})"
        )
    elif pruned.newer_seq is not None and pruned.older_kept:
        parts.append(f"no audit rows pruned: the log starts with rows newer than {cutoff}")
    else:
        parts.append(f"no audit rows older than {cutoff}; nothing pruned")
    if pruned.older_kept:
        parts.append(kept_back_text(pruned))
    if pruned.finished:
        parts.append(f"deleted {pruned.finished} rows an interrupted prune had left")
    if pruned.rows:
        parts.append("the prune itself is on the chain, which still verifies")
    if pruned.rows or pruned.finished:
        parts.append(
            f"{given_back / 2**20:.1f} MiB given back to the file system"
            if given_back is not None
            else "the space they took stays in the file for new rows (this database was made before "
            "Sonde gave pruned space back)"
        )
    return "; ".join(parts)

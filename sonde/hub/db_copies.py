"""Copies of the hub's database put on the disk (`flush`), and the one kept before an upgrade.

An upgrade of the schema has no way back: an older Sonde refuses the upgraded file, and the
operator who did not take a backup first had none to go back to. So before its first
migration the hub copies the file as it is (SQLite's backup: one consistent moment, what its
``-wal`` holds included, as one file) to ``sonde.db.schema-N`` (0600: it holds the hub's signing
key), unless one is there already (an upgrade tried before). A disk without room for the copy
and some to spare gets none, said, and the upgrade goes on: a full disk must not keep the hub
from starting.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlite_utils import Database

log = logging.getLogger("sonde.hub.db")  # said beside the upgrade's own line
SPARE_BYTES = 64 * 2**20  # left free after the copy: the upgrade and the hub write too
COPY_MODE = 0o600


def schema_copy_path(path: Path, version: int) -> Path:
    return path.with_name(f"{path.name}.schema-{version}")


def keep_before_upgrade(db: Database, path: Path, version: int) -> Path | None:
    """Copy the database ``db`` (at ``path``, schema ``version``) to `schema_copy_path`; returns
    where it is, or None when no copy could be made (logged)."""
    target = schema_copy_path(path, version)
    if target.exists():
        return target
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    free = shutil.disk_usage(path.parent).free
    if free < size + SPARE_BYTES:
        log.warning(
            "not keeping a copy of the hub's database as it was before its upgrade: %s has %d MiB "
            "free, the copy needs %d MiB and some to spare",
            path.parent,
            free // 2**20,
            size // 2**20,
        )
        return None
    log.info("keeping the hub's database as it was before its upgrade (%d MiB) as %s", size // 2**20, target)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with copied_into(db.conn, partial):
            pass  # nothing to check: it is the file the hub opened, as it is
        flush(partial)
        os.rename(partial, target)
        flush(target.parent)  # the new name on the disk
    except (OSError, sqlite3.Error) as exc:
        log.warning("could not keep a copy of the hub's database as it was before its upgrade: %s", exc)
        return None
    finally:
        partial.unlink(missing_ok=True)
    return target


@contextmanager
def copied_into(source: sqlite3.Connection, partial: Path) -> Iterator[sqlite3.Connection]:
    """Create ``partial`` (0600: a copy holds the hub's signing key; never over a file) holding
    ``source`` as one file, all its pages in one step (one read transaction, one moment); yield
    the copy, open, for checks. `flush` it after."""
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, COPY_MODE))
    copy = sqlite3.connect(partial)
    try:
        source.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # one file: no -wal to carry beside it
        yield copy
    finally:
        copy.close()


def flush(path: Path) -> None:
    """Put ``path``'s bytes (a directory's: its entries) on the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Every commit of the hub and of the admin commands is on disk when it returns.

Before, every connection ran ``synchronous=NORMAL`` in WAL mode: SQLite synced the -wal file
only at checkpoints (strace showed no fsync for a `sonde hub key revoke`, nor for 100 REST
key creations), so a power loss or a kernel crash could take back every commit since the
last checkpoint: audit rows, a key revocation (the revoked key worked again), a removed
agent, a key the CLI had printed. ``synchronous`` is a setting of the connection, not of
the file: each way the hub and the CLI open the database is checked here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlite_utils import Database

from sonde.hub.admin import open_hub_database
from sonde.hub.db import open_database, open_database_read_only, set_meta
from sonde.hub.store import _Writer, open_store
from sonde.hub.store_batches import WriteOp, commit_batch

FULL = 2  # PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA


def synchronous(db: Database) -> int:
    return int(db.execute("PRAGMA synchronous").fetchone()[0])


async def test_the_hubs_store_commits_to_disk(tmp_path: Path) -> None:
    async with open_store(tmp_path / "sonde.db") as store:
        assert await store.write(synchronous) == FULL  # the writer: group commits, the audit chain


def test_a_writer_opened_again_commits_to_disk(tmp_path: Path) -> None:
    path = tmp_path / "sonde.db"
    open_database(path).close()
    read_only = Database(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, isolation_level=None))
    writer = _Writer(path, read_only)
    failed = commit_batch(writer.db, [WriteOp(lambda db: set_meta(db, "k", "v"), "set_meta", None)])
    writer.reopen_if_read_only(failed)  # what the store does once the file is writable again
    try:
        assert writer.db is not read_only
        assert synchronous(writer.db) == FULL
    finally:
        writer.db.close()


def test_the_hubs_start_and_its_retention_commit_to_disk(tmp_path: Path) -> None:
    path = tmp_path / "sonde.db"
    for db in (open_database(path, check_writable=True), open_database(path, existing=True)):
        try:  # the hub's key at start (`load_or_create_hub_key`); `--audit-keep`'s prune
            assert synchronous(db) == FULL
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            db.close()


def test_the_admin_commands_commit_to_disk(tmp_path: Path) -> None:
    open_database(tmp_path / "sonde.db").close()
    db = open_hub_database(tmp_path)  # every `sonde hub key|token|agent|audit prune ...` that writes
    try:
        assert synchronous(db) == FULL
    finally:
        db.close()


def test_verify_still_only_reads(tmp_path: Path) -> None:
    path = tmp_path / "sonde.db"
    open_database(path).close()
    before = path.read_bytes()
    db = open_database_read_only(path)  # `sonde hub audit verify`
    try:
        assert db.execute("SELECT count(*) FROM audit").fetchone()[0] == 0
    finally:
        db.close()
    assert path.read_bytes() == before
    assert path.with_name("sonde.db-wal").stat().st_size == 0  # a WAL reader's, holding nothing

"""`sonde hub audit verify` only reads: a backup copy on a read-only file system verifies, and
its exit code tells a broken chain (1) from one that could not be checked (3).

Before, verify opened the database to write (``mode=rw``) and ran the migrations: a copy in
a directory it could not write failed with "unable to open database file", an older copy
was upgraded in place, and both that and a broken chain exited 1.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sonde.hub.audit import AuditEntry, append_many
from sonde.hub.db import SCHEMA_VERSION, open_database
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any, without_file_overrides


def fill(data_dir: Path, count: int = 12) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        append_many(db, [AuditEntry(actor="cli", action="cli.key.create", outcome="ok", detail={"i": i},
                                    ts=time.time()) for i in range(count)])  # fmt: skip
    finally:
        db.close()


def verify(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`sonde hub audit verify`, with file modes binding it even as root."""
    argv = [*SONDE, "hub", "audit", "verify", "--data-dir", str(data_dir)]
    return run_any(without_file_overrides(argv), env=base_env(data_dir.parent / "home"), timeout=60)


def files(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(data_dir.iterdir())}


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A hub's data directory as a read-only backup: neither it nor its file can be written."""
    data_dir = tmp_path / "backup"
    fill(data_dir)
    assert sorted(files(data_dir)) == ["sonde.db"]  # a closed WAL database: no -wal, no -shm
    yield data_dir
    data_dir.chmod(0o700)
    (data_dir / "sonde.db").chmod(0o600)


def seal(data_dir: Path) -> None:
    (data_dir / "sonde.db").chmod(0o444)
    data_dir.chmod(0o555)


def test_a_read_only_copy_verifies_and_is_left_as_it_was(read_only: Path) -> None:
    seal(read_only)
    before = files(read_only)
    done = verify(read_only)
    assert done.returncode == 0, done.stderr
    assert "audit chain intact: 12 rows verified" in done.stderr
    assert files(read_only) == before


def test_a_broken_chain_in_a_read_only_copy_exits_1(read_only: Path) -> None:
    with sqlite3.connect(read_only / "sonde.db") as db:
        db.execute("UPDATE audit SET outcome = 'denied' WHERE seq = 5")
    db.close()
    seal(read_only)
    done = verify(read_only)
    assert done.returncode == 1, done.stderr
    assert "audit chain BROKEN at seq 5" in done.stderr


def test_an_older_copy_is_read_as_it_is_not_upgraded(read_only: Path) -> None:
    with sqlite3.connect(read_only / "sonde.db") as db:
        db.execute("ALTER TABLE enrollment_tokens DROP COLUMN revoked_at")  # as version 1 made it
        db.execute("PRAGMA user_version = 1")
    db.close()
    before = files(read_only)["sonde.db"]
    done = verify(read_only)  # the directory may be written (SQLite leaves its -shm there), not the file
    assert done.returncode == 0, done.stderr
    assert f"schema version 1, older than this Sonde's {SCHEMA_VERSION}: read as it is" in done.stderr
    assert files(read_only)["sonde.db"] == before


def test_what_cannot_be_checked_exits_3(read_only: Path, tmp_path: Path) -> None:
    with sqlite3.connect(read_only / "sonde.db") as db:
        db.execute("PRAGMA user_version = 99")
    db.close()
    seal(read_only)
    newer = verify(read_only)
    assert newer.returncode == 3, newer.stderr
    assert "the audit chain was not checked" in newer.stderr
    assert "has schema version 99" in newer.stderr
    missing = verify(tmp_path / "nowhere")
    assert missing.returncode == 3, missing.stderr
    assert "no hub database at" in missing.stderr


@pytest.mark.parametrize("listing", [["key", "list"], ["token", "list"], ["agent", "list"]])
def test_the_listings_read_a_read_only_copy_and_leave_it_as_it_was(
    read_only: Path, listing: list[str]
) -> None:
    """They opened the file to write: `cannot write the hub's database ... attempt to write a
    readonly database`, exit 1 (an operator-day review), where `audit list` and `verify` read it."""
    seal(read_only)
    before = files(read_only)
    argv = [*SONDE, "hub", *listing, "--data-dir", str(read_only)]
    done = run_any(without_file_overrides(argv), env=base_env(read_only.parent / "home"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert files(read_only) == before

"""Opening the hub database: file modes, pragmas, migrations, meta."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub import db as hub_db
from sonde.hub.db import (
    SCHEMA_VERSION,
    get_meta,
    open_database,
    open_read_database,
    schema_version,
    set_meta,
    write_transaction,
)
from sonde.hub.enrollment_tokens import (
    EnrollmentRefused,
    consume_enrollment_token,
    create_enrollment_token,
    list_enrollment_tokens,
    revoke_enrollment_token,
)

T0 = 1_700_000_000.0
TABLES = {"meta", "agents", "revoked_agents", "enrollment_tokens", "api_keys", "audit", "pack_sets"}


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_private_dir_and_file(tmp_path: Path) -> None:
    path = tmp_path / "data" / "hub.db"
    db = open_database(path)
    db.close()
    assert mode_of(path.parent) == 0o700
    assert mode_of(path) == 0o600


def test_pragmas(tmp_path: Path) -> None:
    db = open_database(tmp_path / "hub.db")
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: every commit is on disk
        assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert db.conn.isolation_level is None
    finally:
        db.close()


def test_first_open_creates_schema(tmp_path: Path) -> None:
    db = open_database(tmp_path / "hub.db")
    try:
        assert schema_version(db) == SCHEMA_VERSION == 3
        assert TABLES <= set(db.table_names())
        indexes = {index.name for index in db.table("audit").indexes}
        assert {"idx_audit_ts", "idx_audit_actor", "idx_audit_target"} <= indexes
    finally:
        db.close()


def test_migrations_run_once_and_upgrade_existing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hub.db"
    open_database(path).close()
    calls: list[int] = []

    def add_notes(db: Database) -> None:
        calls.append(1)
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")

    monkeypatch.setattr(hub_db, "MIGRATIONS", (*hub_db.MIGRATIONS, add_notes))
    monkeypatch.setattr(hub_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for _ in range(3):
        db = open_database(path)
        assert schema_version(db) == SCHEMA_VERSION + 1
        assert "notes" in db.table_names()
        db.close()
    assert calls == [1]


def test_failed_migration_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hub.db"
    open_database(path).close()

    def broken(db: Database) -> None:
        db.execute("CREATE TABLE half_done (id INTEGER)")
        raise RuntimeError("migration bug")

    monkeypatch.setattr(hub_db, "MIGRATIONS", (*hub_db.MIGRATIONS, broken))
    monkeypatch.setattr(hub_db, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(RuntimeError, match="migration bug"):
        open_database(path)
    monkeypatch.undo()
    db = open_database(path)
    try:
        assert schema_version(db) == SCHEMA_VERSION
        assert "half_done" not in db.table_names()
    finally:
        db.close()


def test_a_version_1_database_upgrades_and_its_tokens_can_be_revoked(tmp_path: Path) -> None:
    """A hub database written before tokens could be revoked: its tokens keep working, and now revoke."""
    path = tmp_path / "hub.db"
    old = Database(sqlite3.connect(path, isolation_level=None))
    hub_db.MIGRATIONS[0](old)  # the schema as version 1 left it (a migration never changes)
    old.execute("PRAGMA user_version = 1")
    kept, kept_secret = create_enrollment_token(old, now=T0)
    spared, spared_secret = create_enrollment_token(old, now=T0)
    old.close()
    db = open_database(path)
    try:
        assert schema_version(db) == SCHEMA_VERSION
        assert "revoked_at" in db.table("enrollment_tokens").columns_dict
        assert [(t.id, t.state, t.revoked_at) for t in list_enrollment_tokens(db, now=T0 + 1)] == [
            (token.id, "active", None) for token in sorted((kept, spared), key=lambda t: t.id)
        ]
        revoke_enrollment_token(db, kept.id, now=T0 + 2)
        with pytest.raises(EnrollmentRefused, match="revoked at"):
            consume_enrollment_token(db, kept_secret, "web-1", "agent-1", now=T0 + 3)
        assert consume_enrollment_token(db, spared_secret, "web-2", "agent-2", now=T0 + 3).state == "used"
    finally:
        db.close()


def test_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    open_database(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match=r"schema version 99 .* upgrade Sonde"):
        open_database(path)


def test_meta_get_and_set(tmp_path: Path) -> None:
    db = open_database(tmp_path / "hub.db")
    try:
        assert get_meta(db, "missing") is None
        set_meta(db, "k", "one")
        set_meta(db, "k", "two")
        assert get_meta(db, "k") == "two"
    finally:
        db.close()


def write_then_fail(db: Database, key: str) -> None:
    with write_transaction(db):
        set_meta(db, key, "x")
        raise ValueError(key)


def test_write_transaction_rolls_back_and_nests(tmp_path: Path) -> None:
    db = open_database(tmp_path / "hub.db")
    try:
        with pytest.raises(ValueError, match="lost"):
            write_then_fail(db, "lost")
        assert get_meta(db, "lost") is None
        with write_transaction(db):
            set_meta(db, "kept", "x")
            with pytest.raises(ValueError, match="inner"):
                write_then_fail(db, "inner")
        assert get_meta(db, "kept") == "x"
        assert get_meta(db, "inner") is None
        assert not db.conn.in_transaction
    finally:
        db.close()


def test_read_connection_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    writer = open_database(path)
    set_meta(writer, "k", "v")
    reader = open_read_database(path)
    try:
        assert get_meta(reader, "k") == "v"
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            set_meta(reader, "k", "changed")
    finally:
        reader.close()
        writer.close()


def test_read_connection_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        open_read_database(tmp_path / "absent.db")

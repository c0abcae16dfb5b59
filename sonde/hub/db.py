"""The hub's SQLite file: opening it safely, its schema migrations, a small key/value table.

Transaction handling: every connection is opened with ``isolation_level=None``, so the
sqlite3 driver never opens a transaction behind our back; a statement run outside an
explicit transaction commits on its own (sqlite-utils 4 behaves the same way). Code that
needs several statements to be atomic wraps them in :func:`write_transaction`: it issues
``BEGIN IMMEDIATE`` (take the write lock up front, so two writers, the hub and a CLI
command, queue on ``busy_timeout`` instead of failing on a lock upgrade) or, when a
transaction is already open (the store's group commit), a nested SAVEPOINT.

Durability: every connection that writes runs with ``synchronous=FULL``: a commit returns
once the ``-wal`` file holding it is on disk (fsync), and a power loss or a kernel crash keeps
every commit (NORMAL synced only at checkpoints: a revoked key could work again). The hub's
writes are batched (the store's group commit, the audit queue's linger), so that is one fsync
per batch, not one per call.

The schema is versioned by ``PRAGMA user_version``: ``MIGRATIONS[i]`` brings the database
to version ``i + 1``, each in its own transaction.

Before any open, the files around the database are looked at (`sonde.hub.db_files`): an
empty or missing file where a hub's database existed is refused, not made a new hub's.
What can go wrong, and how it is said to a person, is `sonde.hub.db_errors`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from sonde.hub.db_copies import keep_before_upgrade
from sonde.hub.db_errors import (
    DatabaseLost,
    DatabaseTooNew,
    NotAHubDatabase,
    database_unusable,
    file_error,
    raise_worded,
)
from sonde.hub.db_files import lost_database_problem
from sonde.hub.pack_sets import migrate_to_pack_sets

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
# every commit is on disk when it returns (the -wal file is synced), not only at checkpoints
SYNCHRONOUS = "FULL"
DIR_MODE = 0o700
FILE_MODE = 0o600

_SCHEMA_1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
    """CREATE TABLE agents (
        id TEXT PRIMARY KEY,
        name TEXT UNIQUE NOT NULL,
        public_key TEXT NOT NULL,
        hostname TEXT,
        os TEXT,
        os_version TEXT,
        kernel TEXT,
        arch TEXT,
        agent_version TEXT,
        packs TEXT NOT NULL DEFAULT '[]',
        tags TEXT NOT NULL DEFAULT '[]',
        status TEXT NOT NULL DEFAULT 'offline' CHECK (status IN ('offline', 'online', 'degraded')),
        last_seen REAL,
        enrolled_at REAL NOT NULL,
        attestation TEXT,
        pending_attestation TEXT
    )""",
    "CREATE TABLE revoked_agents (id TEXT PRIMARY KEY, name TEXT, revoked_at REAL)",
    """CREATE TABLE enrollment_tokens (
        id TEXT PRIMARY KEY,
        token_hash TEXT UNIQUE NOT NULL,
        name TEXT,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        used_at REAL,
        used_by TEXT
    )""",
    """CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        key_hash TEXT UNIQUE NOT NULL,
        prefix TEXT,
        role TEXT NOT NULL CHECK (role IN ('admin', 'member')),
        policy TEXT,
        created_at REAL NOT NULL,
        revoked_at REAL,
        last_used_at REAL
    )""",
    """CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        ts REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT,
        outcome TEXT NOT NULL,
        duration_ms REAL,
        detail TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    )""",
    "CREATE INDEX idx_audit_ts ON audit (ts)",
    "CREATE INDEX idx_audit_actor ON audit (actor)",
    "CREATE INDEX idx_audit_target ON audit (target)",
)


def _migration_1_initial(db: Database) -> None:
    for statement in _SCHEMA_1:
        db.execute(statement)


def _migration_2_token_revocation(db: Database) -> None:
    # an operator can revoke a token that leaked; the row stays, for the audit trail
    db.execute("ALTER TABLE enrollment_tokens ADD COLUMN revoked_at REAL")


MIGRATIONS: tuple[Callable[[Database], None], ...] = (
    _migration_1_initial,
    _migration_2_token_revocation,
    migrate_to_pack_sets,  # 3: each set of pack descriptions stored once, not in every agent's row
)
SCHEMA_VERSION = len(MIGRATIONS)
HUB_TABLES = {"meta", "agents", "audit"}  # in every hub database since version 1


def open_database(
    path: Path, *, check_writable: bool = False, existing: bool = False, upgrade: bool = True
) -> Database:
    """Open (creating if needed) the hub database at ``path`` and bring its schema up to date
    (not with ``upgrade`` false: the caller checks `schema_version` is one it can use).

    The parent directory is created with mode 0700 and the file with mode 0600 when
    missing; with ``existing`` nothing is created: the file must hold a hub database
    already (an admin command must not make one no hub reads). The connection may be
    used from any thread, one thread at a time.
    Raises, before anything is changed, `DatabaseLost` for a missing or empty file where a
    hub's database existed, and `NotAHubDatabase` for a file that holds another program's
    tables (or, with ``existing``, no hub database); `DatabaseFull` when the file system
    is full; `DatabaseUnusable` for a file or directory that cannot be created or opened,
    or a file that is not SQLite or is damaged;
    `DatabaseTooNew` (a RuntimeError) if the file was written by a newer Sonde; and
    `DatabaseNotWritable` if it cannot be written: SQLite opens a file it may not write
    read-only without a word, so ``check_writable`` also makes one write (rolled back).
    """
    path = Path(path)
    refuse_lost_database(path)
    try:
        if not existing:
            _ensure_private_file(path)
        db = _connect(path.resolve().as_uri() + "?mode=rw", uri=True) if existing else _connect(path)
    except OSError as exc:
        raise file_error(path, exc) from exc
    except sqlite3.Error as exc:
        raise_worded(path, exc)
    try:
        _refuse_other_files(db, path, existing=existing)  # before WAL: a file not ours stays as it was
        if schema_version(db) == 0:  # a new file: pages freed later (an audit prune) can be given back
            db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes before WAL and the first table
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={SYNCHRONOUS}")  # a setting of this connection, not of the file
        if upgrade:
            migrate(db, path)
        else:
            refuse_too_new(db, path)
        if check_writable:
            db.conn.execute("BEGIN IMMEDIATE")
            try:  # fails at once on a read-only file, and leaves nothing
                set_meta(db, "write_check", str(time.time()))
            finally:
                db.conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        db.close()
        raise_worded(path, exc)
    except BaseException:
        db.close()
        raise
    return db


def _refuse_other_files(db: Database, path: Path, *, existing: bool) -> None:
    """Raise `NotAHubDatabase` unless ``path`` holds a hub database (or, unless ``existing``, nothing yet)."""
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master ORDER BY name")]
    if schema_version(db) > 0 and HUB_TABLES <= set(names):
        return  # ours, at some version (`migrate` refuses a newer one)
    if names or schema_version(db) > 0:  # another program's, whatever version it says it is
        shown = ", ".join(repr(name[:40]) for name in names[:3]) + (", ..." if len(names) > 3 else "")
        held = f"it holds another program's tables ({shown})" if names else "it holds no tables"
        raise NotAHubDatabase(
            f"{path} is not a hub database: {held} and no hub schema (user_version "
            f"{schema_version(db)}); nothing was changed. Point --data-dir (or SONDE_DATA_DIR) at "
            "the hub's data directory, or move that file away"
        )
    if existing:
        raise NotAHubDatabase(
            f"no hub database in {path} (the file is empty): pass the hub's --data-dir (or set "
            "SONDE_DATA_DIR), or start the hub once to create it there"
        )


def refuse_lost_database(path: Path) -> None:
    """Raise `DatabaseLost` if ``path`` is missing or empty where a hub's database existed
    (`sonde.hub.db_files`); call it before SQLite opens the file, which would delete its -wal."""
    problem = lost_database_problem(Path(path))
    if problem is not None:
        raise DatabaseLost(problem)


def give_back_free_pages(db: Database, chunk_pages: int = 1024) -> int | None:
    """Return the file's free pages to the file system, ``chunk_pages`` per short write (a
    running hub's writes go on in between); the bytes given back, or None when the file was
    made before Sonde set ``auto_vacuum=INCREMENTAL`` (its free pages are reused for new rows,
    and only a VACUUM with the hub stopped returns them).
    """
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # 2: INCREMENTAL
        return None
    page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
    free = first = int(db.execute("PRAGMA freelist_count").fetchone()[0])
    while free:
        # executescript steps the pragma to its end; execute() would free a single page
        db.conn.executescript(f"PRAGMA incremental_vacuum({int(chunk_pages)});")
        left = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        if left >= free:
            break
        free = left
    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()  # the file shrinks as the log is copied back
    return (first - free) * page_size


def open_database_read_only(path: Path) -> Database:
    """Open an existing hub database only to read it, changing nothing: no migration, no write
    (a backup copy, a read-only mount, a hub running beside). Its schema stays as it is: the
    caller checks `schema_version` is one it can read.

    A WAL database whose directory cannot be written (no ``-shm`` can be made) is read as an
    immutable file, unless a ``-wal`` file next to it holds changes that would then be missed.
    Raises `DatabaseLost`, `NotAHubDatabase`, `DatabaseUnusable`, `DatabaseTooNew`.
    """
    path = Path(path)
    refuse_lost_database(path)
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        db = _read_connection(uri)
    except sqlite3.Error as exc:
        if not _no_shm_can_be_made(exc) or not path.is_file():
            raise_worded(path, exc)
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise database_unusable(
                path, f"{exc}; its -wal file holds changes that cannot be read without writing beside it"
            ) from exc
        try:
            db = _read_connection(uri + "&immutable=1")  # nothing can write there either
        except sqlite3.Error as again:
            raise_worded(path, again)
    try:
        _refuse_other_files(db, path, existing=True)
        refuse_too_new(db, path)
    except BaseException:
        db.close()
        raise
    return db


def _no_shm_can_be_made(error: sqlite3.Error) -> bool:
    """SQLite could not make the ``-shm`` file a WAL reader needs: a read-only mount says
    SQLITE_CANTOPEN, a directory this user may not write SQLITE_READONLY_DIRECTORY."""
    return getattr(error, "sqlite_errorname", "") in ("SQLITE_CANTOPEN", "SQLITE_READONLY_DIRECTORY")


def _read_connection(uri: str) -> Database:
    db = _connect(uri, uri=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the file is opened lazily
    except BaseException:
        db.close()
        raise
    return db


def open_read_database(path: Path) -> Database:
    """Open an existing hub database read-only (``PRAGMA query_only``), for reader threads."""
    uri = Path(path).resolve().as_uri() + "?mode=rw"
    db = _connect(uri, uri=True)
    db.execute("PRAGMA query_only=ON")
    return db


def _connect(target: Path | str, *, uri: bool = False) -> Database:
    conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None, uri=uri)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    return Database(conn, execute_plugins=False)


def ensure_private_dir(directory: Path) -> None:
    """Create ``directory`` (mode 0700) if it is missing; an existing one keeps its mode."""
    if not directory.exists():
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(DIR_MODE)  # mkdir's mode is filtered by the umask


def _ensure_private_file(path: Path) -> None:
    ensure_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)
    path.chmod(FILE_MODE)


def schema_version(db: Database) -> int:
    """The schema version recorded in the file (``PRAGMA user_version``)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: Database, path: Path) -> None:
    """Apply the migrations the database lacks, each in one transaction; an upgrade (of a file
    not new) is logged, the file as it was kept first. Raises `DatabaseTooNew` (a RuntimeError)
    if the database is newer than this code."""
    current = refuse_too_new(db, path)
    upgrade = 0 < current < SCHEMA_VERSION
    kept = keep_before_upgrade(db, path, current) if upgrade else None
    for version, migration in enumerate(MIGRATIONS, start=1):
        if version <= current:
            continue
        with write_transaction(db):
            if schema_version(db) >= version:  # another process migrated meanwhile
                continue
            migration(db)
            db.execute(f"PRAGMA user_version={version}")
    if upgrade:
        upgraded = f"upgraded the hub's database {path} from schema version {current} to {SCHEMA_VERSION}"
        back = f"the file as it was is kept as {kept}" if kept else "restore a backup taken before"
        log.warning("%s: an older Sonde cannot open it now (to go back: %s)", upgraded, back)


def refuse_too_new(db: Database, path: Path | None = None) -> int:
    """The database's schema version; raises `DatabaseTooNew` if it is newer than this code."""
    current = schema_version(db)
    if current > SCHEMA_VERSION:
        where = f" {path}" if path is not None else ""
        raise DatabaseTooNew(
            f"hub database{where} has schema version {current} but this Sonde only knows up to "
            f"version {SCHEMA_VERSION}; upgrade Sonde (or restore a backup made by this version)"
        )
    return current


@contextmanager
def write_transaction(db: Database) -> Iterator[Database]:
    """Run the block atomically: ``BEGIN IMMEDIATE`` ... ``COMMIT``, or a SAVEPOINT if nested.

    An exception in the block rolls the block back and propagates.
    """
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.rollback()
        raise
    try:
        db.conn.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


def query_one(db: Database, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> dict[str, Any] | None:
    """The first row of ``sql`` as a dict, or None."""
    rows = list(db.query(sql, params))
    return rows[0] if rows else None


def get_meta(db: Database, key: str) -> str | None:
    """The value stored under ``key`` in the meta table, or None."""
    row = query_one(db, "SELECT value FROM meta WHERE key = ?", [key])
    return None if row is None else row["value"]


def set_meta(db: Database, key: str, value: str) -> None:
    """Store ``value`` under ``key`` in the meta table (insert or replace)."""
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )

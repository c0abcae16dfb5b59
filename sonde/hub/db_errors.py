"""What can go wrong with the hub's database, and how it is said: `DatabaseUnusable` and its
kinds, each naming the file and what to do, and the wording of a SQLite or OS error for a person
(read-only, full, damaged or unopenable). Opening and migrating the file is `sonde.hub.db`.
"""

from __future__ import annotations

import errno
import os
import resource
import sqlite3
from pathlib import Path
from typing import NoReturn

from sonde.hub.db_files import file_system_full, restore_advice, start_over_advice

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
SPARE_DESCRIPTORS = 4  # what opening a database and its -wal and -shm takes, and the listing
# SQLite's primary result codes for a write the database refused for a reason that lasts
LASTING_FAILURE_CODES = frozenset(
    {
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_NOTADB,
    }
)
LOCK_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def primary_code_in(exc: BaseException, codes: frozenset[int]) -> bool:
    """Whether ``exc`` is a SQLite error whose primary result code is one of ``codes``."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.Error) and isinstance(code, int) and code & 0xFF in codes


class DatabaseUnusable(sqlite3.DatabaseError):
    """The hub's database cannot be used as it is; the message names the file and what to do."""


def database_unusable(path: Path, problem: str) -> DatabaseUnusable:
    """`DatabaseUnusable` for a file or directory the user running Sonde may not create, open or read."""
    return DatabaseUnusable(
        f"cannot use the hub's database {path} ({problem}): the user running this must be able to "
        f"create, read and write the data directory {path.parent} and the files in it (run this as the "
        "hub's user, or check owner and mode, and that the file system is not mounted read-only), or "
        "pass another --data-dir"
    )


class NotAHubDatabase(DatabaseUnusable):
    """The file is no hub's database: another program's (or, where one must exist, an empty file)."""


class DatabaseTooNew(DatabaseUnusable, RuntimeError):
    """The database was written by a newer Sonde (its schema version is past
    `sonde.hub.db.SCHEMA_VERSION`)."""


class DatabaseTooOld(DatabaseUnusable):
    """An admin command found a database an older Sonde wrote: only a hub upgrades it, at its
    start (an older hub may still be serving it, and would fail on the upgraded file)."""


class DatabaseLost(DatabaseUnusable):
    """The hub's database is missing or empty, but the data directory shows one existed
    (`sonde.hub.db_files.lost_database_problem`); nothing was opened or created."""


class DatabaseFull(DatabaseUnusable):
    """The hub's database cannot grow: the file system holding it is full."""

    def __init__(self, path: Path, cause: BaseException | str) -> None:
        super().__init__(
            f"cannot use the hub's database {path}: the file system holding {path.parent} is full "
            f"({cause}); nothing was changed. Free space on that file system (`df -h {path.parent}` "
            "shows it), or move the data directory to a larger one, then try again"
        )


class DatabaseNotWritable(DatabaseUnusable, sqlite3.OperationalError):
    """The hub's database can be opened but not written (the file, its -wal and -shm files or
    their directory are read-only to the hub's user, or the file system is mounted read-only)."""

    def __init__(self, path: Path, cause: BaseException) -> None:
        super().__init__(
            f"cannot write the hub's database {path}: {cause}; the hub's user needs to write it, its "
            "-wal and -shm files and their directory (check owner and mode, and that the file system "
            "is not mounted read-only)"
        )


def is_read_only_error(error: BaseException | None) -> bool:
    """SQLite said SQLITE_READONLY (or one of its kinds), here or in ``error``'s causes."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:  # a cause chain may loop back
        if getattr(error, "sqlite_errorname", "").startswith("SQLITE_READONLY"):
            return True
        seen.add(id(error))
        error = error.__cause__
    return False


def descriptors_spent() -> int | None:
    """This process's open-file limit when (nearly) every descriptor under it is open, else None.

    SQLite says only "unable to open database file" then, which read as a file permission."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError as exc:
        return soft if exc.errno in (errno.EMFILE, errno.ENFILE) else None
    return soft if soft != resource.RLIM_INFINITY and open_now >= soft - SPARE_DESCRIPTORS else None


def database_error(path: Path, error: sqlite3.Error) -> sqlite3.Error:
    """What using ``path`` failed of, for a person: a `DatabaseUnusable` naming the file and what
    to do (a read-only, full, damaged or unopenable file); else ``error`` itself."""
    if isinstance(error, DatabaseUnusable):
        return error
    if is_read_only_error(error):
        return DatabaseNotWritable(path, error)
    name = getattr(error, "sqlite_errorname", "")
    if name == "SQLITE_FULL" or (name.startswith("SQLITE_IOERR") and file_system_full(path)):
        return DatabaseFull(path, error)  # a -shm file that cannot grow is only an I/O error
    if name == "SQLITE_CANTOPEN":
        if (limit := descriptors_spent()) is not None:
            return DatabaseUnusable(
                f"cannot open the hub's database {path}: this process has all of its {limit} file "
                "descriptors open (connections held at once, most likely: `ss -tnp` shows whose); "
                "raise its open-file limit (LimitNOFILE= under systemd, `ulimit -n`), or find who holds them"
            )
        return database_unusable(path, str(error))
    if name == "SQLITE_NOTADB" or name.startswith("SQLITE_CORRUPT"):
        return DatabaseUnusable(
            f"the hub's database {path} is not a SQLite database, or it is damaged ({error}): point "
            f"--data-dir at the hub's data directory, or {restore_advice(path)}; "
            f"{start_over_advice(path)}"
        )
    return error


def raise_worded(path: Path, error: sqlite3.Error) -> NoReturn:
    """Raise `database_error` of ``error``, caused by it (or ``error`` itself, not its own cause)."""
    worded = database_error(path, error)
    if worded is error:
        raise error
    raise worded from error


def file_error(path: Path, error: OSError, *, where: Path | None = None) -> DatabaseUnusable:
    """`DatabaseUnusable` for an OSError making or opening ``path``, its directory or the file
    ``where`` in it: `DatabaseFull` for a full file system, else `database_unusable`'s advice."""
    problem = f"{(error.strerror or str(error)).lower()}: {error.filename or where or path}"
    if error.errno in NO_SPACE_ERRNOS:
        return DatabaseFull(path, problem)
    return database_unusable(path, problem)

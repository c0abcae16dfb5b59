"""A hub's claim on its data directory: one hub per directory, and a word when others may enter it.

Two hubs serving one directory would append to one hash-chained audit log and accept the
same agents. So a hub (`sonde hub`, `sonde up`) holds an exclusive ``flock`` on `LOCK_FILE`
in its data directory from before it opens the database until it exits. The lock belongs to
an open file descriptor, so the system lets it go when the process ends, however it ends:
there is no stale lock to clean up. The holder writes its PID in the file, and a second hub
refuses at start, naming it. The admin commands (`sonde hub key ...`) work beside a running
hub by design and never take the lock.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sonde.hub.db import ensure_private_dir
from sonde.hub.db_errors import DatabaseUnusable, file_error
from sonde.pid_lock import LOCK_FILE_MODE, LockHeld, take_lock, write_pid

log = logging.getLogger(__name__)

LOCK_FILE = "hub.lock"
READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


class DataDirInUse(RuntimeError):
    """Another hub holds this data directory; the message names it and what to do."""


@contextmanager
def claim_data_dir(data_dir: Path) -> Iterator[None]:
    """Hold ``data_dir`` for this hub until the block exits; create it (mode 0700) if missing,
    and warn when an existing one is open to others (`warn_if_open_to_others`).

    Raises `DataDirInUse` when another hub holds it, and `DatabaseUnusable` when the
    directory or its lock file cannot be made or opened (nothing is changed then).
    """
    fd, writable = _open_lock_file(data_dir)
    try:
        if _lock(fd, data_dir) and writable:
            write_pid(fd)
        warn_if_open_to_others(data_dir)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _open_lock_file(data_dir: Path) -> tuple[int, bool]:
    """The lock file's descriptor, and whether it could be opened for writing (a lock needs
    none: a read-only one is locked as well, and opening the database says what is wrong)."""
    path = data_dir / LOCK_FILE
    if data_dir.is_file():  # it named the lock file in it, with advice on permissions
        raise DatabaseUnusable(
            f"the data directory {data_dir} is a file, not a directory: give --data-dir (or "
            "SONDE_DATA_DIR) a directory, which is made if it is missing"
        )
    # not inherited by a child process, which would hold the directory after the hub exits
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        ensure_private_dir(data_dir)
        try:
            return os.open(path, flags | os.O_RDWR | os.O_CREAT, LOCK_FILE_MODE), True
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRNOS or not path.is_file():
                raise
            return os.open(path, flags | os.O_RDONLY), False
    except OSError as exc:  # a full file system is said as such (`DatabaseFull`)
        raise file_error(data_dir / "sonde.db", exc, where=path) from exc


def _lock(fd: int, data_dir: Path) -> bool:
    """Take the lock without waiting; False when the file system has no locks (served unlocked)."""
    try:
        unlocked_why = take_lock(fd)
    except LockHeld as held:
        raise DataDirInUse(in_use_message(data_dir, held.pid)) from None
    if unlocked_why is not None:  # some network mounts: serve anyway, and say so
        log.warning(
            "cannot lock %s (%s): nothing stops a second hub from serving this data directory "
            "at the same time; make sure only one does",
            data_dir / LOCK_FILE,
            unlocked_why,
        )
    return unlocked_why is None


def in_use_message(data_dir: Path, pid: int | None) -> str:
    """Why a second hub does not start on ``data_dir``, and what to do."""
    who = f"another hub (PID {pid})" if pid is not None else "another hub"
    return (
        f"{who} is serving the data directory {data_dir} (it holds {data_dir / LOCK_FILE}): two hubs "
        "on one directory would write one audit log and accept the same agents. Stop that hub "
        "first, or give this one another --data-dir (or SONDE_DATA_DIR); the admin commands "
        "(`sonde hub key ...`, `sonde hub agent ...`) work beside a running hub"
    )


def warn_if_open_to_others(data_dir: Path) -> None:
    """Log a warning when ``data_dir`` is group- or world-accessible: its mode is the operator's
    (the hub makes a missing directory 0700, and changes no existing one), the fix is theirs."""
    try:
        mode = stat.S_IMODE(data_dir.stat().st_mode)
    except OSError:
        return  # opening the database says what is wrong with it
    if mode & 0o077:
        log.warning(
            "data directory %s has mode %o; it holds the hub's database and signing key, run `chmod 700 %s`",
            data_dir,
            mode,
            shlex.quote(str(data_dir)),
        )


KERNEL_LOCK_TABLE = Path("/proc/locks")


def hub_holds(data_dir: Path, lock_table: Path = KERNEL_LOCK_TABLE) -> bool | None:
    """Whether a hub holds ``data_dir`` now, read from the kernel's table of file locks without
    taking the lock (taking it, even for a moment, could make a hub starting then refuse);
    None where that table cannot be read (not Linux) or the lock file cannot be looked at."""
    try:
        found = (data_dir / LOCK_FILE).stat()
    except FileNotFoundError:
        return False  # no hub ever served it (the lock file stays once made)
    except OSError:
        return None
    try:
        table = lock_table.read_text()
    except OSError:
        return None
    wanted = (os.major(found.st_dev), os.minor(found.st_dev), found.st_ino)
    for line in table.splitlines():
        fields = line.split()  # "3: FLOCK  ADVISORY  WRITE 18616 fe:00:2171142 0 EOF"
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue  # a POSIX lock, or a waiter's line: not a hub's hold
        try:
            major, minor, inode = fields[5].split(":")
            held = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:  # a line of a shape not known here
            continue
        if held == wanted:
            return True
    return False

"""An exclusive lock held for a process's life, with the holder's PID written in the lock file.

`fcntl.flock` on an open descriptor, taken without waiting: the system lets it go when the
descriptor is closed or the process ends, however it ends, so there is never a stale lock to
clean up. The holder writes its PID in the file, so a second process can name the first. Used
by the hub for its data directory (`sonde.hub.data_dir`, ``hub.lock``) and by `sonde start`
for its identity (`sonde.agent.identity_lock`, ``agent.lock``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

PID_TEXT_MAX_BYTES = 32
LOCK_FILE_MODE = 0o600
# a file system that has no locks at all (some network mounts): the caller runs unlocked, and says so
NO_LOCKS_ERRNOS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP})


class LockHeld(Exception):
    """Another process holds the lock; ``pid`` is the one it wrote, if it did."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(f"held by PID {pid}" if pid is not None else "held by another process")
        self.pid = pid


def take_lock(fd: int) -> str | None:
    """Lock ``fd`` exclusively without waiting: None once locked; the system's reason when the
    file system has no locks (the caller runs unlocked, and says so).

    Raises `LockHeld` when another process holds it, OSError for any other failure."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LockHeld(holder_pid(fd)) from None
    except OSError as exc:
        if exc.errno not in NO_LOCKS_ERRNOS:
            raise
        return exc.strerror or "no locks"
    return None


def write_pid(fd: int) -> None:
    """Write this process's PID in the lock file ``fd`` (opened for writing), replacing what was there."""
    with contextlib.suppress(OSError):  # a full disk: the PID only helps a person
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def holder_pid(fd: int) -> int | None:
    """The PID the holder wrote in the lock file, if it did (it may be writing it right now)."""
    text = os.pread(fd, PID_TEXT_MAX_BYTES, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None

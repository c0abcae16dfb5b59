"""Open an already resolved path one component at a time, never following a symlink.

``ProbeContext.allowed_path`` resolves a path (symlinks followed) and checks it against
the allow-list; the open comes later, in a worker thread. Had a directory on the way
been swapped for a symlink in between, ``open(path)`` would follow it out of the
allow-list: ``O_NOFOLLOW`` guards only the last component. `open_resolved` walks down
from ``/`` instead, each directory opened relative to the one above it with
``O_NOFOLLOW``. The resolved path holds no symlink, so a symlink met on the way was
swapped in after the check: `PathChanged` (a ValueError, so the probe is refused).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# passing through needs search permission only: O_PATH opens a directory the agent may not list
PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathChanged(ValueError):
    """A component of a resolved path turned into a symlink (or a file) before it was opened."""


def open_resolved(path: Path, flags: int) -> int:
    """A descriptor for ``path`` (absolute, symlinks resolved) opened with ``flags``, following
    no symlink on the way. Raises `PathChanged` when one is met; else what ``os.open`` raises
    (FileNotFoundError, PermissionError, NotADirectoryError for a non-directory opened with
    ``O_DIRECTORY``...)."""
    if not path.is_absolute():
        raise ValueError(f"{path}: not an absolute path")
    *directories, last = path.parts[1:] or ["/"]
    parent = os.open("/", PASS_FLAGS)
    try:
        for part in directories:
            child = _open_at(parent, part, PASS_FLAGS, path, intermediate=True)
            os.close(parent)
            parent = child
        return _open_at(parent, last, flags | os.O_NOFOLLOW | os.O_CLOEXEC, path, intermediate=False)
    finally:
        os.close(parent)


def _open_at(parent: int, name: str, flags: int, path: Path, *, intermediate: bool) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if _is_symlink(parent, name):
            raise PathChanged(
                f"{path}: {name} is a symlink that loops or was swapped in after the path was checked"
            ) from None
        if intermediate:  # a file where the resolved path has a directory: ENOTDIR
            raise PathChanged(f"{path}: {name} is not a directory") from None
        raise


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        return False

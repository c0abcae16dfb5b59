"""What the files around the hub's database say, read before SQLite opens it.

A lost database. SQLite trusts what it finds: given an empty ``sonde.db`` (or one it
creates) with a ``-wal`` file beside it, it deletes that ``-wal`` file, the last of the
lost database's changes, and a hub started there is a new hub: a new signing key, which
the agents enrolled with the old one refuse, a new admin key, an empty audit log. So
before the file is opened, `lost_database_problem` looks for signs that a hub's database
existed in the data directory: a ``-wal`` file that holds something (a first start
writes none before the file holds its first page, synced), or a file a hub writes only
once its database holds rows (`HUB_RAN_FILES`). An empty or missing ``sonde.db`` without
them is a first start, or one interrupted before its first commit, and starts cleanly.

A full disk. SQLite says ``database or disk is full`` when the database or its ``-wal``
file cannot grow, but only ``disk I/O error`` when its ``-shm`` file cannot:
`file_system_full` tells the second from other I/O errors.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from sonde.hub.config import default_data_dir

WAL_SUFFIX = "-wal"
SHM_SUFFIX = "-shm"
# Written only after a hub's database committed its first rows: `sonde.hub.core.HUB_MARK_FILE`
# (the hub's public key), `sonde.hub.core.FIRST_KEY_FILE` (the first admin key) and
# `sonde.quickstart.STATE_FILE` (`sonde up`'s key); each with what it is.
HUB_RAN_FILES = {
    "hub-key.pub": "the public key of the hub whose database was here",
    "first-admin-key": "the first admin key a hub made here",
    "quickstart.json": "the API key `sonde up` made here",
}
# the -shm file grows 32 KiB at a time and the -wal a page at a time: under this, an I/O error
# writing them is the file system being full
FULL_BELOW_BYTES = 1 * 2**20


def lost_database_problem(path: Path) -> str | None:
    """Why ``path`` must not be opened as a new database, or None: it is missing or empty, but
    the files beside it show a hub's database existed (`HUB_RAN_FILES`, a ``-wal`` file that
    holds something). A ``path`` that cannot be looked at is left to the open to report."""
    try:
        state = "empty" if path.stat().st_size == 0 else None
    except FileNotFoundError:
        state = "missing"
    except OSError:
        return None
    signs = _signs_a_hub_ran(path) if state is not None else []
    if not signs:
        return None
    leftovers = ", ".join(str(p) for p in _leftovers(path))
    return (
        f"the hub's database {path} is {state}, but a hub ran in {path.parent}: {'; '.join(signs)}. "
        "Nothing was changed: a hub started on it would be a new hub, with a new signing key (the "
        "agents enrolled with the old one would refuse it), a new admin key and an empty audit log. "
        f"Either {restore_advice(path)}; or, to start a new hub here on purpose, remove {leftovers} "
        "(or pass another --data-dir)"
    )


def restore_advice(path: Path) -> str:
    """How to put a backup of ``path`` in place, for a message: `sonde hub restore`, which moves
    a ``-wal`` file of the old one aside first (SQLite would apply its frames to the copy)."""
    around = [p.name for p in _beside_files(path) if p.exists()]
    after = (
        f" (it moves {' and '.join(around)} aside: they belong to the old file, and SQLite would "
        "apply them to the copy)"
        if around
        else ""
    )
    where = "" if path.parent == default_data_dir() else f" --data-dir {shlex.quote(str(path.parent))}"
    return (
        f"restore {path.name} from a backup, with the hub stopped: `sonde hub restore BACKUP{where}`{after}"
    )


def start_over_advice(path: Path) -> str:
    """How to start a new hub instead of ``path``'s, for a message: every hub file there moved away."""
    shown = " ".join(shlex.quote(str(p)) for p in (path, *_leftovers(path)) if p.exists())
    return f"to start a new hub there instead, move away {shown}"


def _signs_a_hub_ran(path: Path) -> list[str]:
    signs = []
    wal = _beside_files(path)[0]
    if wal_bytes := _size(wal):
        signs.append(f"{wal.name} holds {wal_bytes} bytes of its changes")
    for name, what in HUB_RAN_FILES.items():
        if (path.parent / name).exists():
            signs.append(f"{name} is there ({what})")
    return signs


def _leftovers(path: Path) -> list[Path]:
    """The files a new hub here must not find (an empty ``path`` itself may stay)."""
    return [p for p in (*_beside_files(path), *(path.parent / name for name in HUB_RAN_FILES)) if p.exists()]


def file_system_full(path: Path) -> bool:
    """Whether the file system holding ``path``'s directory has (next to) no room left."""
    try:
        return shutil.disk_usage(path.parent).free < FULL_BELOW_BYTES
    except OSError:
        return False


def _beside_files(path: Path) -> tuple[Path, Path]:
    """``path``'s -wal and -shm files."""
    return path.with_name(path.name + WAL_SUFFIX), path.with_name(path.name + SHM_SUFFIX)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0

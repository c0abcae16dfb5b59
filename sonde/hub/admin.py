"""The plumbing the hub admin actions share (`sonde hub key|token|agent|audit|backup ...`).

The actions (`sonde.hub.admin_credentials`, `sonde.hub.admin_audit`, `sonde.hub.admin_audit_list`,
`sonde.hub.admin_agents`, `sonde.hub.backup`) work directly on the SQLite file (WAL lets them run
beside a live hub), print the secret alone on stdout so scripts can capture it, and everything
else on stderr.
Here: finding and opening the hub's database without ever creating one, checking an argument
before it reaches SQL, putting an action on the audit chain, and `run_admin`, which turns a
database that cannot be used, or a bad argument, into a message and an exit code.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlite_utils import Database

from sonde.echo import echoed, holds_secret
from sonde.hub.audit import record_entry
from sonde.hub.db import (
    SCHEMA_VERSION,
    open_database,
    open_database_read_only,
    refuse_lost_database,
    schema_version,
)
from sonde.hub.db_errors import DatabaseTooOld, DatabaseUnusable, database_error, database_unusable
from sonde.params_words import describe_params_error


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class NoHubDatabase(Exception):
    """The data directory holds no hub database (`run_admin` says so, exit 1)."""


def existing_database(data_dir: Path) -> Path:
    """The hub's database file, for any action: a typo in --data-dir, or a hub started with one
    and a command run without, must not answer from (or leave a key or token in) a database
    made up on the spot, which no hub reads. Raises `NoHubDatabase`; `DatabaseLost` when it is
    missing where a hub's database existed; `DatabaseUnusable` when the directory cannot be read."""
    path = data_dir / "sonde.db"
    refuse_lost_database(path)
    try:
        found = path.is_file()
    except OSError as exc:  # a directory this user may not enter
        raise database_unusable(path, f"{(exc.strerror or str(exc)).lower()}: {data_dir}") from exc
    if not found and data_dir.is_file():
        raise NoHubDatabase(
            f"--data-dir {data_dir} is a file, not a directory: pass the hub's data directory, the one "
            "that holds sonde.db (or set SONDE_DATA_DIR)"
        )
    if not found:
        raise NoHubDatabase(
            f"no hub database at {path}: pass the hub's --data-dir (or set SONDE_DATA_DIR), "
            "or start the hub once to create it there"
        )
    return path


def open_hub_database(data_dir: Path, *, older: bool = False, read_only: bool = False) -> Database:
    """The hub's database in ``data_dir``, opened: never created, never upgraded, and refused
    (changing nothing) when the file there is empty or another program's, or (unless ``older``:
    an audit row is all that is written) an older Sonde's. Raises `NoHubDatabase`, `DatabaseUnusable`.

    Only a hub upgrades its file, at its start: a command run with a new Sonde beside an older
    hub still serving upgraded the file under that hub, which then failed every agent's connect.
    """
    path = existing_database(data_dir)
    # a listing only reads: it also runs on a copy or a read-only mount (it said it could not write)
    db = open_database_read_only(path) if read_only else open_database(path, existing=True, upgrade=False)
    version = schema_version(db)
    if version < SCHEMA_VERSION and not older:
        db.close()
        raise DatabaseTooOld(
            f"the hub's database {path} has schema version {version}, an older Sonde's, and this "
            f"Sonde's commands need version {SCHEMA_VERSION}: start the hub with this Sonde (it "
            "upgrades the file at its start), then run this again. Nothing was changed"
        )
    return db


MAX_ARGUMENT_CHARS = 100  # no id or token is near this long
MAX_AGENT_NAME_CHARS = 63  # NAME_PATTERN's


def checked_argument(what: str, text: str, *, secret: bool = False, limit: int = MAX_ARGUMENT_CHARS) -> str:
    """``text`` when it could be an id, name or token (at most ``limit`` characters); ValueError
    otherwise, showing at most a short prefix of it (none of a ``secret``, or of text shaped like one)."""
    quoted = "" if secret or holds_secret(text) else f" {echoed(text)}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes the shell passed as they were: never a hub's id or name
        raise ValueError(
            f"{what}{quoted} is not UTF-8 text: no {what} holds such bytes (check the quoting and the locale)"
        ) from None
    if len(text) > limit:
        raise ValueError(f"{what}{quoted} is too long: no {what} has more than {limit} characters")
    return text


def run_admin(action: Callable[..., int], data_dir: Path, *args: Any) -> int:
    """Run one admin action on ``data_dir``; a database that cannot be used is a message and exit 1."""
    try:
        return action(data_dir, *args)
    except (NoHubDatabase, DatabaseUnusable) as exc:  # which file, and what to do
        err(f"sonde hub: {exc}")
        return 1
    except sqlite3.Error as exc:  # a full disk, a locked or damaged file: nothing was changed
        err(f"sonde hub: {worded(exc, data_dir)}")
        return 1
    except ValidationError as exc:  # a bad --agents or --probes glob
        err(f"sonde hub: {describe_params_error(exc)}")
        return 2
    except ValueError as exc:  # a bad name or role, said by the check that refused it
        err(f"sonde hub: {exc}")
        return 2


def worded(error: sqlite3.Error, data_dir: Path) -> str:
    """What went wrong with the hub's database in ``data_dir``, naming the file and what to do
    (restore a damaged file from a backup, free space on a full disk) where SQLite's words do not."""
    path = data_dir / "sonde.db"
    explained = database_error(path, error)
    if explained is not error:
        return f"{explained}"
    return f"cannot use the hub's database {path}: {error}; nothing was changed"


def record(db: Any, action: str, target: str | None, outcome: str = "ok", **detail: Any) -> None:
    """Put a CLI admin action on the audit chain (actor ``cli``); a secret in ``target`` (a key
    pasted where its id was due) is never recorded (`bounded_target`), as in the hub's rows."""
    record_entry(db, "cli", action, target, outcome, **detail)

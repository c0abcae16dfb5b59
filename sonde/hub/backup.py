"""`sonde hub backup DEST`: a consistent copy of the hub's database, taken while the hub runs.

SQLite's online backup API copies the database in one read transaction on a
read-only connection: with WAL the hub goes on writing meanwhile, and the copy is
the database as it was when the copy began, every change committed before then
included. The copy is written beside DEST under a temporary name, created 0600
(it holds the hub's signing key and every key's hash), made one self-contained
file (no ``-wal`` beside it), checked (SQLite's integrity check and the audit
chain), flushed to disk and only then renamed to DEST. An existing DEST is never
overwritten; a directory as DEST gets a file named for the moment, to the millisecond, with a
counter after it when a copy of that same moment is there already. A DEST written with a trailing
slash is a directory even when it does not exist yet: it is made then (0700, its missing parents
too), never taken for a file's name (`pathlib` drops that slash, so it is read from the text).

Once the copy has its name, the command is past undoing: Ctrl-C no longer stops it, so the copy
is audited and said, and the exit is 0 (`stop_taking_interrupts`).

Taking a copy is on the audit log (``cli.hub.backup``): whoever has one can pose
as this hub to its agents.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlite_utils import Database

from sonde.hub.admin import err, existing_database, open_hub_database, record
from sonde.hub.audit import verify_audit
from sonde.hub.db import SCHEMA_VERSION, open_database_read_only, schema_version, write_transaction
from sonde.hub.db_copies import copied_into, flush
from sonde.interrupts import stop_taking_interrupts

MAX_SAME_MOMENT = 1000  # copies of one millisecond in one directory: past that, something loops


class DestinationTaken(Exception):
    """The file a copy would be written to exists (a refusal, exit 1: nothing is ever replaced)."""


@dataclass(frozen=True)
class Copied:
    """What a finished copy holds."""

    agents: int
    api_keys: int
    audit_rows: int
    chain_problem: str | None  # None: the copy's audit chain verifies
    schema: int  # its schema version, an older Sonde's when under `SCHEMA_VERSION`

    def older_schema(self) -> str | None:
        """Said when an older Sonde wrote it (its hub still serving it, say): who can open it."""
        if self.schema >= SCHEMA_VERSION:
            return None
        return (
            f"it is an older Sonde's database (schema version {self.schema}, this Sonde's is "
            f"{SCHEMA_VERSION}): this Sonde's hub upgrades it at its start, and that Sonde cannot open it after"
        )


def backup_name(at: float, counter: int = 1) -> str:
    """The file name a directory given as DEST gets: ``sonde-20261126T051500.123Z.db``, then
    ``sonde-20261126T051500.123Z-2.db`` and on for more copies of that same millisecond."""
    millis = int(at * 1000) % 1000
    moment = time.strftime("%Y%m%dT%H%M%S", time.gmtime(at)) + f".{millis:03d}Z"
    return f"sonde-{moment}.db" if counter == 1 else f"sonde-{moment}-{counter}.db"


def destination(dest: Path, at: float) -> Path:
    """Where the copy goes: ``dest``, or in it when it is a directory a file named for ``at`` that
    no file there has. Raises `DestinationTaken` when ``dest`` is a file that exists (a copy is
    never written over anything), ValueError when it is in no directory (a usage error)."""
    if dest.is_dir():
        for counter in range(1, MAX_SAME_MOMENT + 1):
            target = dest / backup_name(at, counter)
            if not (target.exists() or target.is_symlink()):
                return target
        raise DestinationTaken(f"{dest} holds {MAX_SAME_MOMENT} copies of this moment already")
    if dest.exists() or dest.is_symlink():
        raise DestinationTaken(
            f"{dest} exists: a backup never replaces a file; name another, or move that one away"
        )
    if not dest.parent.is_dir():
        raise ValueError(f"{dest.parent} is not a directory: make it first")
    return dest


def directory_made(dest: Path) -> bool:
    """Make ``dest`` a directory (0700, and its missing parents) unless it is one; whether it was
    made. Raises `DestinationTaken` when it, or a parent, is something else (a file), OSError when
    it cannot be made (no permission, a read-only disk)."""
    missing: list[Path] = []
    place = dest
    while not (place.exists() or place.is_symlink()):
        missing.append(place)
        place = place.parent
    if not place.is_dir():
        raise DestinationTaken(f"{place} is a file, not a directory: name a directory to write the copy in")
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: mkdir refuses anything else
            directory.mkdir(mode=0o700)
    return bool(missing)


def copy_into(source: Path, partial: Path) -> Copied:
    """Create ``partial`` (0600, never over a file), copy ``source`` into it (`copied_into`), check
    the copy, and put it on the disk. Raises sqlite3.Error (the source or the copy unreadable, a
    full disk), OSError, or ValueError (the copy fails SQLite's integrity check)."""
    reader = open_database_read_only(source)
    try:
        with copied_into(reader.conn, partial) as target:
            problems = [row[0] for row in target.execute("PRAGMA integrity_check(10)")]
            if problems != ["ok"]:
                raise ValueError(f"the copy failed SQLite's integrity check: {'; '.join(problems)}")
            copy = Database(target)
            report = verify_audit(copy)
            copied = Copied(
                agents=copy["agents"].count,
                api_keys=copy["api_keys"].count,
                audit_rows=copy["audit"].count,  # all, where the check stops at a break
                chain_problem=None if report.ok else f"seq {report.first_bad_seq}: {report.problem}",
                schema=schema_version(copy),
            )
    finally:
        reader.close()
    flush(partial)
    return copied


def publish(partial: Path, dest: Path, target: Path, at: float) -> Path:
    """Give ``partial`` its name, ``target`` (or, into a directory, the next free one should
    another copy of this moment take it meanwhile), and flush the directory entry; returns the
    name. Raises `DestinationTaken` when ``dest`` is a file that appeared meanwhile."""
    while True:
        try:
            os.link(partial, target)  # never replaces a file, even one made since `destination`
            break
        except FileExistsError:
            if not dest.is_dir():
                raise DestinationTaken(f"{target} exists: a backup never replaces a file") from None
            target = destination(dest, at)
    stop_taking_interrupts()  # the copy is in place: what is left is saying so, not undoing it
    partial.unlink()
    flush(target.parent)
    return target


def hub_backup(data_dir: Path, dest_text: str) -> int:
    """`sonde hub backup DEST`: exit 0 with a copy at DEST (its audit chain checked), 1 when no
    copy was made (DEST exists, say; nothing is left behind then), 2 for a DEST in no directory.
    ``dest_text`` is DEST as typed: a trailing slash makes it a directory, made when missing."""
    source = existing_database(data_dir)
    started = time.time()
    dest = Path(dest_text)
    try:
        if dest_text.endswith(("/", os.sep)) and directory_made(dest):
            err(f"sonde hub: created the directory {dest} (mode 0700, with any missing parents)")
        target = destination(dest, started)
    except DestinationTaken as exc:
        err(f"sonde hub: {exc}")
        return 1
    except OSError as exc:
        err(f"sonde hub: no backup made: cannot create the directory {dest}: {exc.strerror or exc}")
        return 1
    except ValueError as exc:
        err(f"sonde hub: {exc}")
        return 2
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        copied = copy_into(source, partial)
        target = publish(partial, dest, target, started)
    except DestinationTaken as exc:
        err(f"sonde hub: no backup made: {exc}")
        return 1
    except ValueError as exc:
        err(f"sonde hub: no backup made: {exc}; restore {source} from an earlier backup")
        return 1
    except OSError as exc:
        err(f"sonde hub: no backup made: cannot write {target}: {exc.strerror or exc}")
        return 1
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    note_backup(data_dir, target, copied)
    chain = (
        "its audit chain verifies"
        if copied.chain_problem is None
        else f"its audit chain is BROKEN at {copied.chain_problem}, as in the hub's database"
    )
    err(
        f"backed up {source} to {target} in {time.time() - started:.1f} s: {counted(copied.agents, 'agent')}, "
        f"{counted(copied.api_keys, 'API key')}, {counted(copied.audit_rows, 'audit row')}; {chain}. It holds the hub's "
        f"signing key: keep it as private as the hub's TLS key. To restore it, with the hub stopped: "
        f"`sonde hub restore {shlex.quote(str(target))} --data-dir {shlex.quote(str(data_dir))}`."
    )
    if older := copied.older_schema():
        err(f"  {older}")
    return 0


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def note_backup(data_dir: Path, target: Path, copied: Copied) -> None:
    """Put the copy on the audit log; a database this user may only read gets a warning instead."""
    try:
        db = open_hub_database(data_dir, older=True)  # copied as it is
        try:
            with write_transaction(db):
                record(db, "cli.hub.backup", str(target), audit_rows=copied.audit_rows)
        finally:
            db.close()
    except sqlite3.Error as exc:
        err(f"sonde hub: (the backup was not put on the audit log: {exc})")

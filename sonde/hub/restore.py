"""`sonde hub restore BACKUP`: put a backup in the place of the hub's database, the hub stopped.

By hand it is four steps, and one missed damages the copy: SQLite applies the ``-wal`` file it
finds beside ``sonde.db`` to whatever file is there, so the old file's ``-wal`` left beside a
restored copy mixed the two, and a hub served the mix without a word (keys made after the
backup alive in it, its audit chain cut, pages SQLite calls malformed). Here:

- the data directory is held as a hub holds it (`claim_data_dir`): refused while a hub runs;
- the backup is copied, as `sonde hub backup` copies, into a new 0600 file in the data
  directory and checked there (a hub's database, SQLite's integrity check, its audit chain);
  nothing is changed when that fails;
- the files it replaces (``sonde.db``, its ``-wal`` and ``-shm``) are moved aside, never
  deleted, to ``sonde.db.replaced-<UTC time>`` (its ``-wal`` and ``-shm`` renamed with it, so
  SQLite still reads them as one), and the checked copy is named ``sonde.db``;
- what the backup takes back is said, read from the replaced file: API keys and agents removed
  since the backup that it knows again, and those made since that it lacks; a backup of
  another hub (another signing key than ``hub-key.pub``) is said too;
- the restore is put on the restored database's audit chain (``cli.hub.restore``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sonde.hub.admin import err, open_hub_database, record
from sonde.hub.backup import MAX_SAME_MOMENT, Copied, backup_name, copy_into, counted
from sonde.hub.data_dir import LOCK_FILE, DataDirInUse, claim_data_dir
from sonde.hub.db import open_database_read_only, write_transaction
from sonde.hub.db_copies import flush
from sonde.hub.db_errors import DatabaseTooNew, DatabaseUnusable, NotAHubDatabase
from sonde.hub.db_files import SHM_SUFFIX, WAL_SUFFIX
from sonde.interrupts import stop_taking_interrupts

HUB_KEY_META = "hub_private_key"  # sonde.hub.core's, read here without importing the server
HUB_MARK_FILE = "hub-key.pub"


@dataclass(frozen=True)
class Held:
    """What one database holds that a restore changes: keys and agents by id."""

    active_keys: dict[str, str]  # id -> name
    revoked_keys: dict[str, str]
    agents: dict[str, str]
    agent_tags: dict[str, str]  # id -> its tags (JSON text): a key's policy may reach an agent by them
    agent_attestations: dict[str, str | None]  # id -> the attestation accepted (JSON text)
    removed_agents: dict[str, str]
    usable_tokens: dict[str, str]  # id -> the name it is reserved for, or its id
    spent_tokens: dict[str, str]  # revoked or used
    hub_key: str | None  # the signing key's text: another hub's database holds another


def hub_restore(data_dir: Path, backup: Path, other_hub: bool = False) -> int:
    """`sonde hub restore BACKUP`: exit 0 with the backup in place, 1 when nothing was changed.
    Another hub's backup is refused unless ``other_hub``."""
    if not backup.is_file():
        err(f"sonde hub: no backup at {backup}: name the file `sonde hub backup` wrote")
        return 2
    made = not data_dir.exists()  # a failed restore there leaves no directory behind
    try:
        with claim_data_dir(data_dir):
            code = restore_held(data_dir, backup, other_hub)
        if code != 0 and made:
            with contextlib.suppress(OSError):
                (data_dir / LOCK_FILE).unlink()
                data_dir.rmdir()
        return code
    except DataDirInUse:
        err(
            f"sonde hub: nothing was restored: a hub is serving the data directory {data_dir} (it "
            "holds its hub.lock); stop that hub first, then restore"
        )
        return 1


def restore_held(data_dir: Path, backup: Path, other_hub: bool) -> int:
    """The restore, with ``data_dir`` held: no hub runs on it meanwhile. The copy being made is
    removed however this ends before it is in place (an error, Ctrl-C)."""
    partial = data_dir / f".sonde.db.restoring-{os.getpid()}"
    try:
        return put_in_place(data_dir, backup, partial, other_hub)
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def put_in_place(data_dir: Path, backup: Path, partial: Path, other_hub: bool) -> int:
    database = data_dir / "sonde.db"
    started = time.time()
    try:
        copied = copy_into(backup, partial)
    except ValueError as exc:
        err(f"sonde hub: nothing was restored: {backup} {exc}")
        return 1
    except DatabaseTooNew as exc:
        err(f"sonde hub: nothing was restored: {backup}: {exc}")
        return 1
    except NotAHubDatabase:
        err(
            f"sonde hub: nothing was restored: {backup} holds no hub database: name a file `sonde hub backup` wrote"
        )
        return 1
    except DatabaseUnusable as exc:
        cause = exc.__cause__ or exc
        err(
            f"sonde hub: nothing was restored: cannot read {backup} as a hub database ({cause}): name a file `sonde hub backup` wrote"
        )
        return 1
    except (sqlite3.Error, OSError) as exc:
        err(f"sonde hub: nothing was restored: cannot copy {backup} into {data_dir}: {exc}")
        return 1
    signed_by = signing_key_of(partial)
    others = other_hubs(data_dir, signed_by)  # read before sonde.db is replaced
    if others and not other_hub:
        err(
            f"sonde hub: nothing was restored: {backup} is another hub's database: its signing key is "
            f"not the one {data_dir / HUB_MARK_FILE} names, and the agents enrolled with this "
            "directory's hub would refuse the hub that served it. To restore it all the same (those "
            "agents then enroll again), pass --other-hub"
        )
        return 1
    try:
        aside = aside_name(database, started)
        moved = move_aside(database, aside)
    except OSError as exc:
        err(f"sonde hub: nothing was restored: cannot move {database} aside: {exc.strerror or exc}")
        return 1
    stop_taking_interrupts()  # the old files are aside: finish, rather than leave no sonde.db
    owner = give_to_owner(partial, data_dir)
    os.rename(partial, database)
    flush(data_dir)  # the new name on the disk
    # read before the audit entry's write, the last to open it: read-only connections leave an
    # empty -wal and -shm behind, a connection that writes removes them as it closes
    restored = holdings(database)
    taken_back = differences(aside if moved else None, restored)
    warning = marked_as_this_hub(data_dir, signed_by) if others else None
    note_restore(data_dir, backup, moved, taken_back)
    err(
        f"restored {database} from {backup}: {counted(copied.agents, 'agent')}, "
        f"{counted(copied.api_keys, 'API key')}, {counted(copied.audit_rows, 'audit row')}; {chain(copied)}."
    )
    if moved:
        kept = ", ".join(sorted(p.name for p in data_dir.glob(f"{glob.escape(aside.name)}*")))
        err(f"  the files it replaced are kept as {kept}: delete them once the hub runs well")
    if owner:
        err(f"  {owner}")
    for line in [*taken_back, *filter(None, [warning, copied.older_schema()])]:
        err(f"  {line}")
    err("  start the hub to serve it")
    return 0


def give_to_owner(path: Path, data_dir: Path) -> str | None:
    """As root, give ``path`` to the data directory's owner (the hub's user), who must open it;
    what was done, for the message (None when nothing was)."""
    if os.geteuid() != 0:
        return None
    owner = data_dir.stat()
    if owner.st_uid == 0:
        return None
    os.chown(path, owner.st_uid, owner.st_gid)
    return f"sonde.db is given to uid {owner.st_uid}, its directory's owner: the hub runs as that user"


def aside_name(database: Path, at: float) -> Path:
    """``sonde.db.replaced-20261126T051500.123Z`` (``-2`` and on after it if taken)."""
    moment = backup_name(at).removeprefix("sonde-").removesuffix(".db")
    for counter in range(1, MAX_SAME_MOMENT + 1):
        aside = database.with_name(
            f"{database.name}.replaced-{moment}" + (f"-{counter}" if counter > 1 else "")
        )
        if not any(os.path.lexists(f"{aside}{suffix}") for suffix in ("", WAL_SUFFIX, SHM_SUFFIX)):
            return aside
    raise OSError(f"{MAX_SAME_MOMENT} replaced files of this moment are there already")


def move_aside(database: Path, aside: Path) -> list[Path]:
    """Rename ``database`` and its -wal and -shm to ``aside`` (+ the same suffixes); what moved.
    On a failure, what had moved is moved back before the OSError goes on."""
    moved: list[tuple[Path, Path]] = []
    try:
        for suffix in ("", WAL_SUFFIX, SHM_SUFFIX):
            source = database.with_name(database.name + suffix)
            if os.path.lexists(source):
                target = aside.with_name(aside.name + suffix)
                os.link(source, target)  # never over an existing file
                source.unlink()
                moved.append((source, target))
    except OSError:
        for source, target in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(target, source)
        raise
    return [target for _, target in moved]


def chain(copied: Copied) -> str:
    if copied.chain_problem is None:
        return "its audit chain verifies"
    return f"its audit chain is BROKEN at {copied.chain_problem}, as it was in the backup"


def holdings(path: Path) -> Held | None:
    """The keys and agents ``path`` holds; None when it cannot be read (said by the caller)."""
    try:
        db = open_database_read_only(path)
    except (sqlite3.Error, OSError):
        return None
    try:
        keys = list(db.execute("SELECT id, name, revoked_at FROM api_keys"))
        # schema 1 (an older Sonde's, restored as it is) has no token revocation
        revoked = "revoked_at" if "revoked_at" in db["enrollment_tokens"].columns_dict else "NULL"
        tokens = list(db.execute(f"SELECT id, name, used_at, {revoked}, expires_at FROM enrollment_tokens"))
        now = time.time()
        hub_key = db.execute("SELECT value FROM meta WHERE key = ?", [HUB_KEY_META]).fetchone()
        agents = list(db.execute("SELECT id, name, tags, attestation FROM agents"))
        return Held(
            active_keys={row[0]: row[1] for row in keys if row[2] is None},
            revoked_keys={row[0]: row[1] for row in keys if row[2] is not None},
            agents={row[0]: row[1] for row in agents},
            agent_tags={row[0]: row[2] for row in agents},
            agent_attestations={row[0]: row[3] for row in agents},
            removed_agents=dict(db.execute("SELECT id, name FROM revoked_agents").fetchall()),
            usable_tokens={
                t[0]: t[1] or t[0] for t in tokens if t[2] is None and t[3] is None and t[4] > now
            },
            spent_tokens={t[0]: t[1] or t[0] for t in tokens if t[2] is not None or t[3] is not None},
            hub_key=None if hub_key is None else str(hub_key[0]),
        )
    except sqlite3.Error:
        return None
    finally:
        db.close()


def differences(replaced: Path | None, restored: Held | None) -> list[str]:
    """What the restore took back, compared with the file it replaced, for a person to act on."""
    if replaced is None or restored is None:
        return []
    before = holdings(replaced)
    if before is None:
        return [f"{replaced.name} could not be read, to say what the backup takes back"]
    if before.hub_key != restored.hub_key:
        return [f"it is another hub's database than {replaced.name} was: nothing of the one taken back"]
    lines = []
    if tokens := sorted(set(restored.usable_tokens) & set(before.spent_tokens)):
        lines.append(
            "enrollment tokens revoked or used since the backup can enroll again: "
            f"{named(tokens, restored.usable_tokens)}; revoke them (`sonde hub token revoke ID`)"
        )
    if back := sorted(set(restored.active_keys) & set(before.revoked_keys)):
        lines.append(
            f"API keys revoked since the backup are active again: {named(back, restored.active_keys)}; "
            "revoke them again (`sonde hub key revoke ID`)"
        )
    if gone := sorted(set(before.active_keys) - set(restored.active_keys) - set(restored.revoked_keys)):
        lines.append(f"API keys made since the backup are gone: {named(gone, before.active_keys)}")
    if known := sorted(set(restored.agents) & set(before.removed_agents)):
        lines.append(
            f"agents removed since the backup are known again: {named(known, restored.agents)}; "
            "remove them again (`sonde hub agent remove NAME`)"
        )
    kept = set(before.agents) & set(restored.agents)
    if retagged := sorted(i for i in kept if before.agent_tags[i] != restored.agent_tags[i]):
        lines.append(
            f"agents tagged otherwise since the backup have the backup's tags again (keys scoped by tag "
            f"reach them as then): {named(retagged, restored.agents)}; `sonde hub agent list` shows them"
        )
    if accepted := sorted(i for i in kept if before.agent_attestations[i] != restored.agent_attestations[i]):
        lines.append(
            "agents whose attestation was accepted since the backup have the backup's again, and may be "
            f"held when they connect: {named(accepted, restored.agents)}; accept them again once you know "
            "why (`sonde hub agent accept NAME`)"
        )
    if lost := sorted(set(before.agents) - set(restored.agents)):
        lines.append(
            f"agents enrolled since the backup are unknown to it and must enroll again: "
            f"{named(lost, before.agents)}"
        )
    return lines


def named(ids: list[str], names: dict[str, str], shown: int = 10) -> str:
    """``name (id)``, by name, the first ``shown`` of them."""
    ids = sorted(ids, key=lambda i: (names[i], i))
    listed = [f"{names[i]} ({i})" for i in ids[:shown]]
    return ", ".join(listed) + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def signing_key_of(path: Path) -> str | None:
    """The public key of the hub whose database ``path`` is (the copy being restored, read as
    it stands: no -wal or -shm made beside it); None when it holds none or cannot be read."""
    from sonde.protocol.signing import private_key_from_text, public_key_to_text

    try:
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = ?", [HUB_KEY_META]).fetchone()
        finally:
            db.close()
        return None if row is None else public_key_to_text(private_key_from_text(str(row[0])).public_key())
    except (sqlite3.Error, ValueError):
        return None


def other_hubs(data_dir: Path, public_key: str | None) -> bool:
    """Whether ``public_key`` is another hub's than the one ``hub-key.pub`` names, or, without
    that file (deleted, or an older Sonde's directory), the one ``sonde.db`` holds now (False
    when neither is known: a directory no hub ran in yet)."""
    try:
        marked: str | None = (data_dir / HUB_MARK_FILE).read_text().strip()
    except (OSError, UnicodeDecodeError):
        marked = signing_key_of(data_dir / "sonde.db") if (data_dir / "sonde.db").is_file() else None
    return public_key is not None and marked is not None and public_key != marked


def marked_as_this_hub(data_dir: Path, public_key: str | None) -> str:
    """``hub-key.pub`` made to name the restored hub's key (--other-hub), and that said."""
    mark = data_dir / HUB_MARK_FILE
    try:
        partial = mark.with_name(f".{mark.name}.{os.getpid()}")
        partial.write_text(f"{public_key}\n")
        give_to_owner(partial, data_dir)  # as sonde.db: the hub's user reads it at each start
        os.replace(partial, mark)
    except OSError as exc:
        return (
            f"this backup is another hub's (--other-hub); {mark} could not be made to name its signing "
            f"key ({exc.strerror or exc}): delete it, and the hub writes it at its start"
        )
    return (
        f"this backup is another hub's (--other-hub): {mark} now names its signing key, and the agents "
        "enrolled with the hub it replaced must enroll again"
    )


def note_restore(data_dir: Path, backup: Path, moved: list[Path], taken_back: list[str]) -> None:
    """Put the restore on the restored database's audit chain; a failure is said, not fatal."""
    try:
        db = open_hub_database(data_dir, older=True)  # restored as it is: the hub upgrades it
        try:
            with write_transaction(db):
                record(
                    db, "cli.hub.restore", str(backup), replaced=[p.name for p in moved], takenBack=taken_back
                )
        finally:
            db.close()
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            err(f"sonde hub: (the restore was not put on the audit log: {exc})")

"""The hub's parts wired together: one object passed to every handler.

`open_hub(config)` opens the store, loads or creates the hub's signing key
and the first admin key, and yields a `Hub`. No module-level state: two hubs
can run in one process.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import trio
from sqlite_utils import Database

from sonde.hub.agent_records import mark_all_offline
from sonde.hub.agent_removal import cut_off_removed_agents
from sonde.hub.attestation import watch_accepted_agents
from sonde.hub.audit import AuditEntry, audit_entry, record_entry
from sonde.hub.audit_queue import AuditQueue, AuditUnavailable
from sonde.hub.audit_retention import keep_audit_for
from sonde.hub.auth import KeyRing
from sonde.hub.config import HubConfig, default_data_dir
from sonde.hub.connection_lines import say_connection_counts
from sonde.hub.db import get_meta, open_database, set_meta, write_transaction
from sonde.hub.db_watch import watch_database_file
from sonde.hub.fleet import Fleet
from sonde.hub.free_space import watch_free_space
from sonde.hub.keys import count_active_admin_keys, create_api_key
from sonde.hub.logs import say
from sonde.hub.store import Store, open_store
from sonde.hub.tag_changes import watch_tag_changes
from sonde.hub.write_health import retry_writes
from sonde.packs.base import PackLoadError
from sonde.packs.registry import PackRegistry, load_packs
from sonde.protocol.signing import (
    Ed25519PrivateKey,
    new_private_key,
    private_key_from_text,
    private_key_to_text,
    public_key_to_text,
)
from sonde.secret_input import may_show_secret
from sonde.stderr_lines import say_line

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")
HUB_KEY_META = "hub_private_key"
FIRST_KEY_FILE = "first-admin-key"  # the first admin key, when the hub's stderr is not a terminal
HUB_MARK_FILE = "hub-key.pub"  # the hub's public key, written once its database holds it
SHUTTING_DOWN = "the hub is shutting down"


@dataclass
class Hub:
    config: HubConfig
    store: Store
    fleet: Fleet
    keys: KeyRing
    signing_key: Ed25519PrivateKey
    packs: PackRegistry
    started_at: float = field(default_factory=time.time)
    # `sonde up`'s own agent, in this process: a change of its claim is accepted at once, not held
    local_agent_id: str | None = None

    def __post_init__(self) -> None:
        self.audit_queue = AuditQueue(self.store)

    async def audit(
        self,
        actor: str,
        action: str,
        target: str | None,
        outcome: str,
        *,
        duration_ms: float | None = None,
        detail: dict[str, Any] | None = None,
        unauthenticated: bool = False,
    ) -> None:
        """Append to the audit chain without waiting for the commit (batched: `AuditQueue`): for
        what changes nothing (a call, a refusal); a change is recorded with `write_audited`.

        The target and each detail value are cut to a bounded size (`bounded_target`,
        `bounded_detail`): they may hold what a caller sent, a pasted secret even (never
        recorded: `bounded_target`). An ``unauthenticated``
        entry (one no credential vouches for: a caller can cause it at will) draws on
        the hub-wide budget of `sonde.hub.audit_budget`.
        """
        entry = audit_entry(actor, action, target, outcome, duration_ms=duration_ms, detail=detail)
        if unauthenticated:
            await self.audit_queue.append_unauthenticated(entry)
        else:
            await self.audit_queue.append(entry)

    async def write_audited(
        self, change: Callable[[Database], T], entry_for: Callable[[T], AuditEntry | None]
    ) -> T:
        """Make a change and put it on the audit chain in one transaction: after a crash, both
        are in the database or neither is (a change an admin makes must never be unrecorded).

        ``change`` is a store op; ``entry_for`` builds the entry from its result (`audit_entry`;
        None: nothing to record), in the writer thread. Returns what ``change`` returns. Raises
        what it raises (nothing of it is written), `StoreCommitFailed` when the database did not
        take the write (nothing was written). `AuditQueue.write_with`.
        """
        return await self.audit_queue.write_with(change, entry_for)

    async def stop_when(self, shutdown: trio.Event, *then: Callable[[], None]) -> None:
        """The server's shutdown trigger: once ``shutdown`` is set, end every agent's connection
        (`Fleet.close_all`), run each of ``then`` (ending other long-lived streams), and
        return: the server then stops gracefully.

        In that order, a probe waiting on an agent fails at once with the reason, and its
        caller is answered while the server still answers; no agent socket or idle event
        stream holds the server open until its graceful timeout.
        """
        await shutdown.wait()
        log.info("shutting down: closing %d agent connection(s)", len(self.fleet.sessions))
        self.fleet.close_all(SHUTTING_DOWN)
        for step in then:
            step()

    async def read_audit(
        self, fn: Callable[Concatenate[Database, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`Store.read` of the audit chain, with every entry appended before the call in it."""
        try:
            await self.audit_queue.flush()
        except AuditUnavailable:
            pass  # what is committed can still be read; the rest waits in memory
        return await self.store.read(fn, *args, **kwargs)


def load_or_create_hub_key(config: HubConfig) -> Ed25519PrivateKey:
    db = open_database(config.db_path)
    try:
        text = get_meta(db, HUB_KEY_META)
        if text is None:
            key = new_private_key()
            set_meta(db, HUB_KEY_META, private_key_to_text(key))
        else:
            key = private_key_from_text(text)
    finally:
        db.close()
    mark_hub_ran(config.data_dir, key)
    return key


def mark_hub_ran(data_dir: Path, key: Ed25519PrivateKey) -> None:
    """Write `HUB_MARK_FILE` (the hub's public key) once its database holds that key, if missing.

    The sign that a hub's database existed here which an operator never deletes: with it,
    a ``sonde.db`` lost after a clean stop (no ``-wal`` left, ``first-admin-key`` deleted
    as advised) is refused as lost, not taken for a first start (`sonde.hub.db_files`).
    One that names another key means ``sonde.db`` is another hub's: said, not refused.
    """
    path = data_dir / HUB_MARK_FILE
    text = f"{public_key_to_text(key.public_key())}\n"
    if path.exists() or path.is_symlink():
        try:
            marked = path.read_text()
        except (OSError, UnicodeDecodeError):
            return
        if marked.strip() != text.strip():
            log.warning(
                "%s holds the signing key of another hub than %s names: it is another hub's "
                "database (a backup of another hub?), and the agents enrolled with this directory's "
                "hub will refuse this one. If that is meant, delete %s",
                data_dir / "sonde.db",
                path,
                path,
            )
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def bootstrap_admin_key(db: Database) -> tuple[str, str] | None:
    """Create the first admin key on an empty store, on the audit chain; returns its id and its
    secret once, else None.

    A store op, run once the hub listens: a first start that fails before then (a
    TLS key that does not match its certificate, a port in use) must not leave an
    admin key behind that nobody was shown."""
    if count_active_admin_keys(db) > 0 or get_meta(db, "bootstrapped") is not None:
        return None
    with write_transaction(db):  # the key, its audit entry and the mark, or none of them
        key, secret = create_api_key(db, "admin", role="admin")
        record_entry(db, "hub", "hub.api_key.create", key.id, name=key.name, role=key.role, why="first start")
        set_meta(db, "bootstrapped", str(time.time()))
    return key.id, secret


class FirstKeyNotShown(Exception):
    """The first admin key was made, but its file could not be written: nobody will ever see it."""


def announce_admin_key(secret: str, data_dir: Path, key_id: str, log_format: str = "text") -> None:
    """Show the first admin key on a terminal, and never put it in a log.

    With stderr a terminal (and text logs) the key is printed there. Otherwise stderr is a
    log (the journal under systemd, a file, JSON lines for a shipper) that others may read
    or ship: the key goes to a file only this user can read, `FIRST_KEY_FILE` in the data
    directory, and the log says where (in json mode as one JSON record: `sonde.hub.logs.say`).
    """
    where = "" if data_dir == default_data_dir() else f" --data-dir {shlex.quote(str(data_dir))}"
    create_more = f"sonde hub key create --name NAME{where}"
    more = f"  Create more with `{create_more}`.\n"
    if may_show_secret(log_format):
        say_line(
            f"\n  First start: created an admin API key. It is shown once and never again:\n\n    {secret}\n\n{more}"
        )
        return
    path = data_dir / FIRST_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            os.fchmod(handle.fileno(), 0o600)  # an old file of this name keeps its mode through O_TRUNC
            handle.write(secret + "\n")
    except OSError as exc:
        # The key is in the database and marked made: the next start makes none. Say so, and how
        # to get one; and leave no half-written file that looks like a key.
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
        raise FirstKeyNotShown(
            f"created the first admin API key (id {key_id}), but could not write it to {path} "
            f"({exc.strerror or exc}), so it cannot be shown. Fix that (often: free disk space there), "
            f"then make an admin key with `sonde hub key create --name admin --role admin{where}` and "
            f"revoke the unshown one with `sonde hub key revoke {key_id}{where}`"
        ) from exc
    if log_format == "json":
        message = (
            f"first start: created an admin API key; it is not logged (logs are read by others): it is in "
            f"{path}, readable by this user only. Read it, keep it somewhere safe, then delete that file. "
            f"Create more with `{create_more}`"
        )
        say(message, log_format, logger=__name__, keyFile=str(path), keyId=key_id)
        return
    say(
        f"\n  First start: created an admin API key. stderr is not a terminal, so it is not printed\n"
        f"  here (logs are read by others): it is in {path}, readable by this user only.\n"
        f"  Read it, keep it somewhere safe, then delete that file.\n{more}",
        log_format,
    )


def load_pack_code(packs: PackRegistry) -> None:
    """Import every pack's probe and runbook modules before the hub serves.

    Left to the first `list_capabilities` or `health_check`, it took some 0.3 s of the event
    loop (every agent's heartbeats and probes waiting), and a pack whose code cannot load was
    found only then. Such a pack is named here; its tools' calls say the same again.
    """
    for pack in packs.packs.values():
        try:
            pack.runbooks  # noqa: B018  (loads the pack's modules)
        except PackLoadError as exc:
            log.warning("%s", exc)


@asynccontextmanager
async def open_hub(config: HubConfig, packs: PackRegistry | None = None) -> AsyncIterator[Hub]:
    signing_key = load_or_create_hub_key(config)
    async with open_store(config.db_path) as store:
        # none is connected yet: "online" is what a hub that did not stop cleanly left behind
        records = await store.write(mark_all_offline)
        fleet = Fleet(store, records, config.max_probes_in_flight_per_agent)
        hub = Hub(config, store, fleet, KeyRing(store), signing_key, packs or load_packs())
        load_pack_code(hub.packs)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hub.audit_queue.run)
                nursery.start_soon(retry_writes, store)  # while writes fail: when do they work again?
                nursery.start_soon(watch_free_space, config.db_path.parent)
                nursery.start_soon(watch_database_file, store)  # removed or replaced: saved, and stop
                nursery.start_soon(cut_off_removed_agents, hub)  # by `sonde hub agent remove`
                nursery.start_soon(watch_accepted_agents, hub)  # by `sonde hub agent accept`
                nursery.start_soon(watch_tag_changes, hub)  # by `sonde hub agent tag`
                nursery.start_soon(say_connection_counts)  # agents online, offline, held past a burst
                nursery.start_soon(fleet.keep_last_seen_written, config.last_seen_write_every_s)
                if config.audit_keep_s is not None:
                    nursery.start_soon(keep_audit_for, config.db_path, config.audit_keep_s, store.health)
                try:
                    yield hub
                finally:
                    nursery.cancel_scope.cancel()  # the flusher queues what is left; the store commits it
        finally:
            with trio.CancelScope(shield=True):
                await fleet.record_departures()  # the agents the shutdown closed; the store commits it

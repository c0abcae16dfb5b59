"""Admin actions on a hub's data directory, for the CLI (`sonde hub key|token|audit ...`).

These work directly on the SQLite file (WAL lets them run beside a live hub),
print the secret alone on stdout so scripts can capture it, and everything
else on stderr.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlite_utils import Database

from sonde.echo import echoed, holds_secret
from sonde.hub.agent_records import list_agents
from sonde.hub.audit import (
    AuditVerification,
    record_entry,
    verify_audit,
)
from sonde.hub.audit_prune import MIN_PRUNE_AGE_S, AuditPruned, kept_back_text, prune_and_give_back, utc_text
from sonde.hub.db import (
    SCHEMA_VERSION,
    DatabaseUnusable,
    database_error,
    database_unusable,
    open_database,
    open_database_read_only,
    refuse_lost_database,
    schema_version,
    write_transaction,
)
from sonde.hub.keys import (
    API_KEY_PREFIX,
    ENROLLMENT_TOKEN_PREFIX,
    MAX_KEY_NAME_CHARS,
    EnrollmentTokenRecord,
    LastAdminKey,
    TokenNotRevocable,
    create_api_key,
    create_enrollment_token,
    list_api_keys,
    list_enrollment_tokens,
    parse_duration,
    revoke_api_key_named,
    revoke_enrollment_token,
)
from sonde.hub.policy import NewPolicy, Policy, unmatched_probe_globs
from sonde.packs.base import Pack, PackLoadError
from sonde.packs.executor import describe_params_error
from sonde.packs.registry import load_packs


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
    if not found:
        raise NoHubDatabase(
            f"no hub database at {path}: pass the hub's --data-dir (or set SONDE_DATA_DIR), "
            "or start the hub once to create it there"
        )
    return path


def open_hub_database(data_dir: Path) -> Database:
    """The hub's database in ``data_dir``, opened: never created, and refused (changing nothing)
    when the file there is empty or another program's. Raises `NoHubDatabase`, `DatabaseUnusable`."""
    return open_database(existing_database(data_dir), existing=True)


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


def key_create(data_dir: Path, name: str, role: str, agents: Sequence[str], probes: Sequence[str]) -> int:
    checked_argument("API key name", name, limit=MAX_KEY_NAME_CHARS)
    policy = NewPolicy(agents=tuple(agents), probes=tuple(probes))
    db = open_hub_database(data_dir)
    try:
        # before the key is made: nothing may stand between its making and its secret's printing
        unmatched = unmatched_probe_globs(policy.probes, known_probe_names(db)) if policy.probes else []
        policy_data = policy.model_dump(mode="json") if (agents or probes) else None
        with write_transaction(db):  # the key and its audit entry, or neither; the facts REST's row has
            key, secret = create_api_key(db, name, role=role, policy=policy_data)
            record(db, "cli.api_key.create", key.id, name=name, role=role, policy=policy_data)
    finally:
        db.close()
    err(f"created {key.role} API key {key.id} ({key.name}); {policy.describe()}")
    for glob in unmatched:  # not refused: the pack may be installed, or its agent enrolled, later
        err(
            f"sonde hub: warning: --probes {echoed(glob)} matches no probe known to this hub (none of its "
            "packs, nor any enrolled agent's); the key reaches no probe through it until one appears"
        )
    err("the secret is shown once:")
    print(secret, flush=True)
    return 0


def known_probe_names(db: Database) -> set[str]:
    """The probes this hub knows of: those of the packs installed with it, and those each
    enrolled agent registered (a pack of its own included)."""
    names = {name for pack in load_packs().packs.values() for name in described_probe_names(pack)}
    for agent in list_agents(db):
        names |= {str(probe.get("name")) for pack in agent.packs for probe in pack.get("probes", [])}
    return names


def described_probe_names(pack: Pack) -> list[str]:
    """The names of ``pack``'s probes, from its saved description when it has one (no probe code
    imported); none for a third-party pack whose code cannot load, or describe itself, here."""
    try:
        return [probe.name for probe in pack.descriptor().probes]
    except (PackLoadError, ValidationError):
        return []


def key_list(data_dir: Path, as_json: bool) -> int:
    db = open_hub_database(data_dir)
    try:
        records = list_api_keys(db)
    finally:
        db.close()
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return 0
    print(f"{'ID':34} {'NAME':20} {'ROLE':7} {'STATE':8} {'PREFIX':14} POLICY")
    for r in records:
        state = "revoked" if r.revoked_at else "active"
        policy = Policy.model_validate(r.policy).describe() if r.policy else "-"
        print(f"{r.id:34} {r.name[:20]:20} {r.role:7} {state:8} {r.prefix:14} {policy}")
    return 0


def key_revoke(data_dir: Path, key: str) -> int:
    """Revoke a key by its id or its secret; the audit row names its id (never the secret).
    Revoking the last admin key is refused, on the record, exit 1."""
    checked_argument("API key id", key, secret=key.strip().startswith(API_KEY_PREFIX))
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):
            try:
                done = revoke_api_key_named(db, key, time.time())
            except LastAdminKey as refusal:
                record(db, "cli.api_key.revoke", refusal.key_id, "refused")
                err(f"sonde hub: {refusal}")
                return 1
            record(db, "cli.api_key.revoke", done.target, "ok" if done.revoked else "not_found")
    finally:
        db.close()
    if not done.revoked:
        err(f"{done.message} (see `sonde hub key list`)")
        return 1
    err(f"{done.message}; a running hub stops accepting it within a few seconds")
    return 0


def token_create(data_dir: Path, ttl: str, name: str | None) -> int:
    try:
        ttl_s = parse_duration(ttl)
    except ValueError as exc:
        err(f"--ttl: {exc}")
        return 2
    if name is not None:
        checked_argument("agent name", name, limit=MAX_AGENT_NAME_CHARS)
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # the facts REST's row has
            token, secret = create_enrollment_token(db, ttl_s, name)
            record(db, "cli.token.create", token.id, name=name, ttl_s=ttl_s)
    finally:
        db.close()
    reserved = f" for agent {name!r}" if name else ""
    expires = utc_text(token.expires_at)
    err(f"created single-use enrollment token {token.id}{reserved}, valid until {expires}:")
    print(secret, flush=True)
    return 0


def token_list(data_dir: Path, show_all: bool, as_json: bool) -> int:
    """The tokens that could still enroll an agent; with ``show_all`` used, expired and revoked ones too."""
    db = open_hub_database(data_dir)
    try:
        records = list_enrollment_tokens(db, time.time())
        names: dict[str, str] = dict(db.execute("SELECT id, name FROM agents").fetchall())
    finally:
        db.close()
    if not show_all:
        records = [r for r in records if r.state == "active"]
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return 0
    print(f"{'ID':34} {'NAME':20} {'STATE':8} {'CREATED':20} {'EXPIRES':20} DETAIL")
    for r in records:
        name = r.name or "-"
        created, expires = utc_text(r.created_at), utc_text(r.expires_at)
        print(f"{r.id:34} {name[:20]:20} {r.state:8} {created:20} {expires:20} {token_detail(r, names)}")
    return 0


def token_detail(token: EnrollmentTokenRecord, agent_names: dict[str, str]) -> str:
    if token.used_at is not None:
        agent = token.used_by or "?"
        who = f"{agent_names[agent]} ({agent})" if agent in agent_names else agent  # a removed agent: its id
        return f"used at {utc_text(token.used_at)} by agent {who}"
    if token.revoked_at is not None:
        return f"revoked at {utc_text(token.revoked_at)}"
    return "-"


def token_revoke(data_dir: Path, token: str) -> int:
    checked_argument("enrollment token", token, secret=token.strip().startswith(ENROLLMENT_TOKEN_PREFIX))
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # the revocation and its audit entry, or neither
            revoked = revoke_token_recorded(db, token)
    finally:
        db.close()
    if isinstance(revoked, TokenNotRevocable):
        err(f"{revoked.message} (see `sonde hub token list --all`)")
        return 1
    reserved = f" (for agent {revoked.name!r})" if revoked.name else ""
    err(f"revoked enrollment token {revoked.id}{reserved}; it can no longer enroll an agent")
    return 0


def revoke_token_recorded(db: Any, token: str) -> EnrollmentTokenRecord | TokenNotRevocable:
    """Revoke the token (by id or by its text) and put that on the audit chain, or put there why it was not.
    The row names the token by id, never by its text."""
    try:
        revoked = revoke_enrollment_token(db, token, time.time())
    except TokenNotRevocable as refusal:
        record(db, "cli.token.revoke", refusal.token_id, "not_found", state=refusal.state)
        return refusal
    record(db, "cli.token.revoke", revoked.id, "ok", name=revoked.name)
    return revoked


# `sonde hub audit verify` exits with: 0 the chain is intact, 1 it is broken (an edit, a cut),
# 3 it could not be checked (no database, unreadable, too new); 2 is a usage error.
VERIFY_INTACT, VERIFY_BROKEN, VERIFY_UNCHECKED = 0, 1, 3


def audit_verify(data_dir: Path) -> int:
    """Check the audit chain, only reading the database (a backup copy, a read-only mount, a
    running hub's); the exit code tells a broken chain from one that could not be checked."""
    try:
        db = open_database_read_only(existing_database(data_dir))
        try:
            version = schema_version(db)
            report = verify_audit(db)
        finally:
            db.close()
    except (NoHubDatabase, DatabaseUnusable) as exc:
        err(f"sonde hub: the audit chain was not checked: {exc}")
        return VERIFY_UNCHECKED
    except sqlite3.Error as exc:  # found reading it: a damaged file is said as the open says it
        explained = database_error(data_dir / "sonde.db", exc)
        err(f"sonde hub: the audit chain was not checked: {explained}")
        return VERIFY_UNCHECKED
    if version < SCHEMA_VERSION:
        err(
            f"(schema version {version}, older than this Sonde's {SCHEMA_VERSION}: read as it is, not upgraded)"
        )
    if not report.ok:
        err(f"audit chain BROKEN at seq {report.first_bad_seq}: {report.problem}")
        return VERIFY_BROKEN
    err(_intact(report))
    return VERIFY_INTACT


def _intact(report: AuditVerification) -> str:
    if report.rows == report.starts_after == report.awaiting_deletion == 0:
        return (
            "audit chain intact: the log is empty. Nothing in the database shows rows were ever "
            "written; the chain has no secret key, so whoever can write the database could also "
            "have removed every trace of them"
        )
    pruned = f" (rows up to {report.starts_after} were pruned)" if report.starts_after else ""
    waiting = (
        f"; {report.awaiting_deletion} pruned rows still wait to be deleted (a prune was "
        "interrupted: run `sonde hub audit prune` again)"
        if report.awaiting_deletion
        else ""
    )
    return f"audit chain intact: {report.rows} rows verified{pruned}{waiting}"


PROGRESS_EVERY_S = 2.0  # a long prune says how far it is at most this often


def audit_prune(data_dir: Path, older_than: str) -> int:
    """Delete the audit rows older than ``older_than`` (at least a day) at the start of the log;
    the rest still verifies. A running hub goes on writing meanwhile."""
    try:
        age_s = parse_duration(older_than)
    except ValueError as exc:
        err(f"--older-than: {exc}")
        return 2
    if age_s < MIN_PRUNE_AGE_S:
        err(f"--older-than must be at least 1d (got {older_than}): recent rows are what an audit is for")
        return 2
    before = time.time() - age_s
    db = open_hub_database(data_dir)
    try:
        pruned, given_back = prune_and_give_back(db, before, progress=ProgressLine())
    except ValueError as exc:
        err(f"not pruning: {exc}; see `sonde hub audit verify`")
        return 1
    finally:
        db.close()
    err(_pruned_message(pruned, utc_text(before), given_back))
    return 0


class ProgressLine:
    """Says on stderr how far a prune is, at most every `PROGRESS_EVERY_S` (a short one says nothing)."""

    def __init__(self) -> None:
        self.next_at = time.monotonic() + PROGRESS_EVERY_S

    def __call__(self, phase: str, done: int, total: int) -> None:
        if time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + PROGRESS_EVERY_S
        doing = "checking the chain" if phase == "check" else "deleting"
        err(f"audit prune: {doing}: {done} of {total} rows")


def _pruned_message(pruned: AuditPruned, cutoff: str, given_back: int | None) -> str:
    """What a prune did, truthfully: it cuts only from the start of the log."""
    parts: list[str] = []
    if pruned.rows:
        parts.append(
            f"pruned {pruned.rows} audit rows older than {cutoff} (through row {pruned.through_seq})"
        )
    elif pruned.newer_seq is not None and pruned.older_kept:
        parts.append(f"no audit rows pruned: the log starts with rows newer than {cutoff}")
    else:
        parts.append(f"no audit rows older than {cutoff}; nothing pruned")
    if pruned.older_kept:
        parts.append(kept_back_text(pruned))
    if pruned.finished:
        parts.append(f"deleted {pruned.finished} rows an interrupted prune had left")
    if pruned.rows:
        parts.append("the prune itself is on the chain, which still verifies")
    if pruned.rows or pruned.finished:
        parts.append(
            f"{given_back / 2**20:.1f} MiB given back to the file system"
            if given_back is not None
            else "the space they took stays in the file for new rows (this database was made before "
            "Sonde gave pruned space back)"
        )
    return "; ".join(parts)


def agent_accept(data_dir: Path, name: str) -> int:
    """Accept a held agent's new attestation as its baseline."""
    from sonde.hub.agent_records import find_agent_by_name, get_agent
    from sonde.hub.attestation import accept_pending

    checked_argument("agent name", name)
    db = open_hub_database(data_dir)
    try:
        agent = find_agent_by_name(db, name) or get_agent(db, name)
        if agent is None:
            err(f"no agent named {echoed(name)}")
            return 1
        pending = agent.pending_attestation
        if pending is None:
            err(f"agent {agent.name} has no changed attestation waiting; nothing to accept")
            return 0
        with write_transaction(db):
            accept_pending(db, agent.id)
            record(db, "attestation.accept", agent.name, accepted=pending)
    finally:
        db.close()
    err(f"accepted the new attestation of {agent.name}; its probes run again")
    return 0


def agent_remove(data_dir: Path, name: str) -> int:
    """Remove an agent (by name or id), as `DELETE /api/v1/agents/{id}` does: a running hub cuts it
    off within seconds (`sonde.hub.agent_removal`) and refuses its reconnects."""
    from sonde.hub.agent_records import delete_agent
    from sonde.hub.agent_removal import find_agent, removal_audit

    checked_argument("agent name or id", name)
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # the removal and its audit entry, or neither
            agent = find_agent(db, name)
            if agent is not None:
                delete_agent(db, agent.id, time.time())
                target, detail = removal_audit(agent)
                record(db, "cli.agent.remove", target, **detail)
    finally:
        db.close()
    if agent is None:
        err(f"no agent named {echoed(name)} (see `sonde hub agent list`)")
        return 1
    err(
        f"removed agent {agent.name} ({agent.id}); a running hub cuts it off within a few seconds and "
        "refuses it from then on (re-enrolling it needs a new token)"
    )
    return 0


def agent_list(data_dir: Path, as_json: bool) -> int:
    """The agents enrolled with the hub; the status is the last one the hub wrote."""
    from sonde.hub.agent_records import list_agents
    from sonde.hub.tools.views import pack_labels

    db = open_hub_database(data_dir)
    try:
        records = list_agents(db)
    finally:
        db.close()
    if as_json:
        # its packs as `name@version`, as GET /api/v1/agents lists them (not every probe's descriptor)
        listed = [{**r.model_dump(mode="json", exclude={"packs"}), "packs": pack_labels(r)} for r in records]
        print(json.dumps(listed, indent=2))
        return 0
    print(f"{'NAME':24} {'ID':34} {'STATUS':9} {'LAST SEEN':20} TAGS")
    for r in records:
        seen = utc_text(r.last_seen) if r.last_seen else "never"
        print(f"{r.name[:24]:24} {r.id:34} {r.status:9} {seen:20} {', '.join(r.tags) or '-'}")
    return 0

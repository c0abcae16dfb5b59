"""Hub admin actions on API keys and enrollment tokens (`sonde hub key|token create|list|revoke`).

Create, list and revoke, on the hub's data directory: a secret is printed alone on stdout,
once, and never recorded; each change and its audit row are written together, or neither.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlite_utils import Database

from sonde.echo import echoed
from sonde.hub.admin import MAX_AGENT_NAME_CHARS, checked_argument, err, open_hub_database, record
from sonde.hub.agent_records import find_agent_by_name, list_agents
from sonde.hub.db import write_transaction
from sonde.hub.durations import parse_duration, read_as_seconds
from sonde.hub.enrollment_tokens import (
    ENROLLMENT_TOKEN_PREFIX,
    MAX_TOKEN_TTL_S,
    MIN_TOKEN_TTL_S,
    EnrollmentTokenRecord,
    TokenNotRevocable,
    create_enrollment_token,
    list_enrollment_tokens,
    revoke_enrollment_token,
)
from sonde.hub.keys import (
    ACTIVE_NAMED,
    API_KEY_PREFIX,
    MAX_KEY_NAME_CHARS,
    LastAdminKey,
    create_api_key,
    list_api_keys,
    revoke_api_key_named,
)
from sonde.hub.policy import NewPolicy, Policy, unmatched_agent_patterns, unmatched_probe_globs
from sonde.hub.utc_times import utc_text
from sonde.packs.base import Pack, PackLoadError
from sonde.packs.registry import load_packs


def key_create(data_dir: Path, name: str, role: str, agents: Sequence[str], probes: Sequence[str]) -> int:
    checked_argument("API key name", name, limit=MAX_KEY_NAME_CHARS)
    policy = NewPolicy(agents=tuple(agents), probes=tuple(probes))
    db = open_hub_database(data_dir)
    try:
        # before the key is made: nothing may stand between its making and its secret's printing
        unmatched = unmatched_probe_globs(policy.probes, known_probe_names(db)) if policy.probes else []
        enrolled = [(agent.name, agent.tags) for agent in list_agents(db)] if policy.agents else []
        no_agent = unmatched_agent_patterns(policy.agents, enrolled)
        namesakes = [row["id"] for row in db.query(ACTIVE_NAMED, [name])]
        policy_data = policy.model_dump(mode="json") if (agents or probes) else None
        with write_transaction(db):  # the key and its audit entry, or neither; the facts REST's row has
            key, secret = create_api_key(db, name, role=role, policy=policy_data)
            record(db, "cli.api_key.create", key.id, name=name, role=role, policy=policy_data)
    finally:
        db.close()
    err(f"created {key.role} API key {key.id} ({key.name}); {policy.describe()}")
    if namesakes:  # not refused: a key replaced by a new one of its name is revoked after (by id)
        err(
            f"sonde hub: warning: {len(namesakes)} other active API key(s) have this name ({', '.join(namesakes)}): "
            "revoke or filter them by id (`sonde hub key revoke ID`)"
        )
    for pattern in no_agent:  # not refused either: the agent may enroll, or be tagged, later
        err(f"sonde hub: warning: {unmatched_agent_warning(pattern)}")
    for glob in unmatched:  # not refused: the pack may be installed, or its agent enrolled, later
        err(
            f"sonde hub: warning: --probes {echoed(glob)} matches no probe known to this hub (none of its "
            "packs, nor any enrolled agent's); the key reaches no probe through it until one appears"
        )
    err("the secret is shown once:")
    print(secret, flush=True)
    return 0


def unmatched_agent_warning(pattern: str) -> str:
    """What `key_create` says of an ``--agents`` glob or ``#tag`` no agent enrolled now matches."""
    if pattern.startswith("#"):
        return (
            f"--agents {echoed(pattern)} matches no agent enrolled now (none has the tag {pattern[1:]}); "
            "the key is made all the same, as one may enroll or be tagged later, and reaches no agent "
            "through it until then"
        )
    return (
        f"--agents {echoed(pattern)} matches no agent enrolled now; the key is made all the same, as "
        "one may enroll later, and reaches no agent through it until then"
    )


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
    db = open_hub_database(data_dir, read_only=True)
    try:
        records = list_api_keys(db)
    finally:
        db.close()
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return 0
    print(f"{'ID':34} {'NAME':20} {'ROLE':7} {'STATE':8} {'PREFIX':14} {'LAST USED':20} POLICY")
    for r in records:
        state = "revoked" if r.revoked_at else "active"
        policy = Policy.model_validate(r.policy).describe() if r.policy else "-"
        used = utc_text(r.last_used_at) if r.last_used_at is not None else "never"
        print(f"{r.id:34} {r.name[:20]:20} {r.role:7} {state:8} {r.prefix:14} {used:20} {policy}")
    return 0


def key_revoke(data_dir: Path, key: str) -> int:
    """Revoke a key by its id, its name (one active key's) or its secret; the audit row names its
    id (never the secret).
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
        err(f"sonde hub: --ttl: {exc}")
        return 2
    if not MIN_TOKEN_TTL_S <= ttl_s <= MAX_TOKEN_TTL_S:  # said as typed, not in seconds
        err(
            f"sonde hub: --ttl must be 60s to 7d, not {ttl.strip()}{read_as_seconds(ttl, 'm', MIN_TOKEN_TTL_S, MAX_TOKEN_TTL_S)}"
        )
        return 2
    if name is not None:
        checked_argument("agent name", name, limit=MAX_AGENT_NAME_CHARS)
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # the facts REST's row has
            token, secret = create_enrollment_token(db, ttl_s, name)
            record(db, "cli.token.create", token.id, name=name, ttl_s=ttl_s)
            enrolled = None if name is None else find_agent_by_name(db, name)
    finally:
        db.close()
    reserved = f" for agent {name!r}" if name else ""
    expires = utc_text(token.expires_at)
    err(f"created single-use enrollment token {token.id}{reserved}, valid until {expires}:")
    if enrolled is not None:
        kept = ", ".join(enrolled.tags) or "none"
        err(f"enrolling with it replaces agent {enrolled.id}; the new identity keeps its tags ({kept})")
    print(secret, flush=True)
    return 0


def token_list(data_dir: Path, show_all: bool, as_json: bool) -> int:
    """The tokens that could still enroll an agent; with ``show_all`` used, expired and revoked ones too."""
    db = open_hub_database(data_dir, read_only=True)
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

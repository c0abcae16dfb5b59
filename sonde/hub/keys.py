"""API keys: made here, shown once, stored only as SHA-256 hex.

Plain synchronous functions over a ``sqlite_utils.Database``, so the running hub (through
``Store.write`` / ``Store.read``) and CLI commands working on the data dir share them.
The hash of a secret (`sonde.hub.secret_records`) never leaves this module and
`sonde.hub.enrollment_tokens`: records carry ids, names, roles and times.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlite_utils import Database

from sonde.echo import echoed, holds_secret
from sonde.hub.audit_filters import NON_KEY_ACTORS
from sonde.hub.db import query_one
from sonde.hub.secret_records import hash_secret, now_or
from sonde.hub.utc_times import iso_utc
from sonde.name_rules import secret_shaped
from sonde.protocol.names import SECRET_SHAPE

Role = Literal["admin", "member"]
ROLES: tuple[Role, ...] = ("admin", "member")
API_KEY_PREFIX = "sonde_"
API_KEY_SECRET_BYTES = 32
DISPLAY_PREFIX_CHARS = 12
MAX_SECRET_CHARS = 256  # longer presented secrets are refused without hashing
MAX_KEY_NAME_CHARS = 64

_KEY_NAME_RE = re.compile(rf"[A-Za-z0-9 ._-]{{1,{MAX_KEY_NAME_CHARS}}}")
_API_KEY_COLUMNS = "id, name, prefix, role, policy, created_at, revoked_at, last_used_at"


class ApiKeyRecord(BaseModel):
    """An API key as the hub shows it: never the secret, never its hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    prefix: str
    role: Role
    policy: dict[str, Any] | None = None
    created_at: float
    revoked_at: float | None = None
    last_used_at: float | None = None


# shared with sonde.hub.enrollment_tokens
def _check_api_key_args(name: str, role: str, policy: object) -> None:
    if (refusal := secret_shaped("API key name", name)) is not None:
        raise ValueError(refusal)
    if not _KEY_NAME_RE.fullmatch(name) or not name.strip():
        raise ValueError(
            f"invalid API key name {name!r}: use 1 to 64 letters, digits, spaces, '.', '_' or '-'"
        )
    if name.lower() in NON_KEY_ACTORS:
        raise ValueError(
            f"an API key may not be named {name!r}: the audit log names {name.lower()!r} an actor that "
            "is no key, and a filter by that name would find one of the two; choose another name"
        )
    if role not in ROLES:
        raise ValueError(f"invalid role {role!r}: must be one of {', '.join(ROLES)}")
    if policy is not None and not isinstance(policy, dict):
        raise ValueError("an API key policy must be a JSON object or None")
    if role == "admin" and policy:
        raise ValueError(
            "an admin key reaches every agent and probe whatever its policy says: "
            "give a policy (agents and probes: --agents / --probes on the command line) to a member key instead"
        )


def _api_key_from_row(row: dict[str, Any]) -> ApiKeyRecord:
    policy = None if row["policy"] is None else json.loads(row["policy"])
    return ApiKeyRecord.model_validate({**row, "policy": policy})


def create_api_key(
    db: Database,
    name: str,
    role: str = "member",
    policy: dict[str, Any] | None = None,
    now: float | None = None,
) -> tuple[ApiKeyRecord, str]:
    """Make an API key; returns its record and the secret, which is never stored nor shown again.

    Raises ValueError on a bad name (1..64 of ``[A-Za-z0-9 ._-]``), role or policy.
    """
    _check_api_key_args(name, role, policy)
    secret = API_KEY_PREFIX + secrets.token_urlsafe(API_KEY_SECRET_BYTES)
    row = {
        "id": uuid.uuid4().hex,
        "name": name,
        "prefix": secret[:DISPLAY_PREFIX_CHARS],
        "role": role,
        "policy": None if policy is None else json.dumps(policy, sort_keys=True),
        "created_at": now_or(now),
        "revoked_at": None,
        "last_used_at": None,
    }
    db.execute(
        "INSERT INTO api_keys (id, name, key_hash, prefix, role, policy, created_at) "
        "VALUES (:id, :name, :key_hash, :prefix, :role, :policy, :created_at)",
        {**row, "key_hash": hash_secret(secret)},
    )
    return _api_key_from_row(row), secret


def list_api_keys(db: Database) -> list[ApiKeyRecord]:
    """Every API key, revoked ones included, oldest first."""
    rows = db.query(f"SELECT {_API_KEY_COLUMNS} FROM api_keys ORDER BY created_at, id")
    return [_api_key_from_row(row) for row in rows]


def get_api_key(db: Database, key_id: str) -> ApiKeyRecord | None:
    """The API key with this id (revoked or not), or None."""
    row = query_one(db, f"SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE id = ?", [key_id])
    return None if row is None else _api_key_from_row(row)


class LastAdminKey(Exception):
    """Revoking this key (``key_id``) would leave no admin key: nobody could manage the hub over
    its API. A refusal, not a usage error."""

    def __init__(self, message: str, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


def revoke_api_key(db: Database, key_id: str, now: float | None = None) -> bool:
    """Revoke the key with this id; False if it is unknown or already revoked. Raises `LastAdminKey`
    for the last active admin key."""
    row = query_one(db, "SELECT role, name FROM api_keys WHERE id = ? AND revoked_at IS NULL", [key_id])
    if row is not None and row["role"] == "admin" and count_active_admin_keys(db) <= 1:
        raise LastAdminKey(
            f"API key {key_id} ({row['name']}) is the last active admin key: create another admin key "
            "first (`sonde hub key create --name NAME --role admin`), then revoke this one",
            key_id,
        )
    cursor = db.execute(
        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [now_or(now), key_id]
    )
    return cursor.rowcount == 1


@dataclass(frozen=True)
class KeyRevocation:
    """What `revoke_api_key_named` did. ``target`` names the key for the audit row: its id, the id
    asked for when no key has it, or None when it was asked for by a secret no key has (never the
    secret itself). ``message`` is for people and never shows a secret."""

    revoked: bool
    target: str | None
    message: str


ACTIVE_NAMED = "SELECT id FROM api_keys WHERE name = ? AND revoked_at IS NULL ORDER BY created_at"


def revoke_api_key_named(db: Database, key: str, now: float | None = None) -> KeyRevocation:
    """Revoke the key with this id, or whose secret this is (``sonde_...``): whoever finds a key
    where it should not be has its text at hand, not its id; or the one active key of this name
    (two of one name are refused, naming their ids). Surrounding blanks are ignored.

    Raises `LastAdminKey` (naming the key by id) for the last active admin key.
    """
    text = key.strip()
    if holds_secret(text):
        row = (
            query_one(db, "SELECT id FROM api_keys WHERE key_hash = ?", [hash_secret(text)])
            if SECRET_SHAPE.fullmatch(text)
            else None
        )
        if row is None:
            return KeyRevocation(
                False, None, "no API key has that secret (give the secret alone, or the key's id)"
            )
        text = row["id"]
    elif get_api_key(db, text) is None:  # not an id: a name, as `sonde hub key list` shows them
        named = [row["id"] for row in db.query(ACTIVE_NAMED, [text])]
        if len(named) > 1:
            return KeyRevocation(
                False,
                None,
                f"{len(named)} active API keys are named {echoed(text)}: give one's id ({', '.join(named)})",
            )
        text = named[0] if named else text
    if revoke_api_key(db, text, now):
        return KeyRevocation(True, text, f"revoked API key {text}")
    record = get_api_key(db, text)
    if record is None or record.revoked_at is None:
        return KeyRevocation(False, text, f"no active API key with the id or name {echoed(text)}")
    return KeyRevocation(
        False,
        record.id,
        f"API key {record.id} ({record.name}) was already revoked at {iso_utc(record.revoked_at)}",
    )


def find_api_key(db: Database, secret: str) -> ApiKeyRecord | None:
    """The active key whose secret this is; None if unknown or revoked."""
    if not secret or len(secret) > MAX_SECRET_CHARS:
        return None
    row = query_one(
        db,
        f"SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
        [hash_secret(secret)],
    )
    return None if row is None else _api_key_from_row(row)


@dataclass(frozen=True)
class RevokedKeyUse:
    """A request refused for bearing a revoked key: what its audit row adds (the key's id, never
    its text) and what its 401 says (read only by whoever holds the key)."""

    detail: dict[str, str]
    message: str


def revoked_key_use(db: Database, secret: str) -> RevokedKeyUse | None:
    """How to name a refused use of the revoked key whose secret this is; None for any other text.

    One read by the hash's unique index, asked only once authentication failed (which the
    failed-login limiter bounds): an authenticated request never pays for it.
    """
    if not secret or len(secret) > MAX_SECRET_CHARS:
        return None
    row = query_one(
        db,
        "SELECT id, revoked_at FROM api_keys WHERE key_hash = ? AND revoked_at IS NOT NULL",
        [hash_secret(secret)],
    )
    if row is None:
        return None
    when = iso_utc(row["revoked_at"])
    return RevokedKeyUse(
        {"keyId": row["id"], "reason": "key revoked"},
        f"this API key was revoked at {when}; ask an admin for a new one",
    )


def touch_api_key(db: Database, key_id: str, now: float) -> None:
    """Record that the key was used at ``now``."""
    db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", [now, key_id])


def count_active_admin_keys(db: Database) -> int:
    """How many unrevoked admin keys exist (to refuse revoking the last one)."""
    row = query_one(db, "SELECT count(*) AS n FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL")
    return 0 if row is None else int(row["n"])

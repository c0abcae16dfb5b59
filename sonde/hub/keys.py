"""API keys and enrollment tokens: made here, shown once, stored only as SHA-256 hex.

Plain synchronous functions over a ``sqlite_utils.Database``, so the running hub (through
``Store.write`` / ``Store.read``) and CLI commands working on the data dir share them.
The hash of a secret never leaves this module: records carry ids, names, roles and times.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlite_utils import Database

from sonde.echo import SECRET_SHAPE, echoed, holds_secret
from sonde.hub.db import query_one, write_transaction
from sonde.name_rules import invalid_agent_name
from sonde.protocol.enrollment import TOKEN_PATTERN
from sonde.protocol.names import NAME_PATTERN

Role = Literal["admin", "member"]
TokenState = Literal["active", "used", "expired", "revoked"]  # only an active token enrolls
ROLES: tuple[Role, ...] = ("admin", "member")
ENROLLMENT_TOKEN_PREFIX = "enr_"
API_KEY_PREFIX = "sonde_"
API_KEY_SECRET_BYTES = 32
ENROLLMENT_TOKEN_BYTES = 24
DISPLAY_PREFIX_CHARS = 12
DEFAULT_TOKEN_TTL_S = 900.0
MIN_TOKEN_TTL_S = 60.0
MAX_TOKEN_TTL_S = 7 * 24 * 3600.0
MAX_SECRET_CHARS = 256  # longer presented secrets are refused without hashing
MAX_KEY_NAME_CHARS = 64

UNKNOWN_TOKEN = "unknown_token"
TOKEN_USED = "token_used"
TOKEN_EXPIRED = "token_expired"
TOKEN_REVOKED = "token_revoked"
TOKEN_NAME_MISMATCH = "token_name_mismatch"

_KEY_NAME_RE = re.compile(rf"[A-Za-z0-9 ._-]{{1,{MAX_KEY_NAME_CHARS}}}")
_TOKEN_RE = re.compile(TOKEN_PATTERN)
_AGENT_NAME_RE = re.compile(NAME_PATTERN)
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_DURATION_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_API_KEY_COLUMNS = "id, name, prefix, role, policy, created_at, revoked_at, last_used_at"
_TOKEN_COLUMNS = "id, name, created_at, expires_at, used_at, used_by, revoked_at"


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


class EnrollmentTokenRecord(BaseModel):
    """An enrollment token as the hub shows it; ``name`` is the agent name it is reserved for,
    ``used_by`` the id of the agent it enrolled, ``state`` as of when it was read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str | None = None
    created_at: float
    expires_at: float
    used_at: float | None = None
    used_by: str | None = None
    revoked_at: float | None = None
    state: TokenState = "active"


class TokenNotRevocable(Exception):
    """No token that could still enroll is this one: ``state`` is None for an unknown token, else
    why it cannot (used, expired or revoked already). ``token_id`` names it for the audit row: its
    id, the id asked for, or None when it was asked for by a text no token has. ``message`` is for people."""

    def __init__(self, state: TokenState | None, message: str, token_id: str | None = None) -> None:
        super().__init__(message)
        self.state = state
        self.message = message
        self.token_id = token_id


class EnrollmentRefused(Exception):
    """An enrollment token was refused; ``code`` is stable, ``message`` is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# --- API keys ----------------------------------------------------------------


def _check_api_key_args(name: str, role: str, policy: object) -> None:
    if not _KEY_NAME_RE.fullmatch(name) or not name.strip():
        raise ValueError(
            f"invalid API key name {name!r}: use 1 to 64 letters, digits, spaces, '.', '_' or '-'"
        )
    if role not in ROLES:
        raise ValueError(f"invalid role {role!r}: must be one of {', '.join(ROLES)}")
    if policy is not None and not isinstance(policy, dict):
        raise ValueError("an API key policy must be a JSON object or None")
    if role == "admin" and policy:
        raise ValueError(
            "an admin key reaches every agent and probe whatever its policy says: "
            "give --agents / --probes (a policy) to a member key instead"
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
        "created_at": _now(now),
        "revoked_at": None,
        "last_used_at": None,
    }
    db.execute(
        "INSERT INTO api_keys (id, name, key_hash, prefix, role, policy, created_at) "
        "VALUES (:id, :name, :key_hash, :prefix, :role, :policy, :created_at)",
        {**row, "key_hash": _hash_secret(secret)},
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
        "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", [_now(now), key_id]
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


def revoke_api_key_named(db: Database, key: str, now: float | None = None) -> KeyRevocation:
    """Revoke the key with this id, or whose secret this is (``sonde_...``): whoever finds a key
    where it should not be has its text at hand, not its id. Surrounding blanks are ignored.

    Raises `LastAdminKey` (naming the key by id) for the last active admin key.
    """
    text = key.strip()
    if holds_secret(text):
        row = (
            query_one(db, "SELECT id FROM api_keys WHERE key_hash = ?", [_hash_secret(text)])
            if SECRET_SHAPE.fullmatch(text)
            else None
        )
        if row is None:
            return KeyRevocation(
                False, None, "no API key has that secret (give the secret alone, or the key's id)"
            )
        text = row["id"]
    if revoke_api_key(db, text, now):
        return KeyRevocation(True, text, f"revoked API key {text}")
    record = get_api_key(db, text)
    if record is None or record.revoked_at is None:
        return KeyRevocation(False, text, f"no active API key with id {echoed(text)}")
    return KeyRevocation(
        False,
        record.id,
        f"API key {record.id} ({record.name}) was already revoked at {_iso(record.revoked_at)}",
    )


def find_api_key(db: Database, secret: str) -> ApiKeyRecord | None:
    """The active key whose secret this is; None if unknown or revoked."""
    if not secret or len(secret) > MAX_SECRET_CHARS:
        return None
    row = query_one(
        db,
        f"SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
        [_hash_secret(secret)],
    )
    return None if row is None else _api_key_from_row(row)


def touch_api_key(db: Database, key_id: str, now: float) -> None:
    """Record that the key was used at ``now``."""
    db.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", [now, key_id])


def count_active_admin_keys(db: Database) -> int:
    """How many unrevoked admin keys exist (to refuse revoking the last one)."""
    row = query_one(db, "SELECT count(*) AS n FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL")
    return 0 if row is None else int(row["n"])


# --- enrollment tokens -------------------------------------------------------


def create_enrollment_token(
    db: Database, ttl_s: float = DEFAULT_TOKEN_TTL_S, name: str | None = None, now: float | None = None
) -> tuple[EnrollmentTokenRecord, str]:
    """Make a single-use enrollment token valid for ``ttl_s``; returns its record and the secret.

    ``name`` reserves the token for the agent of that name. Raises ValueError if ``ttl_s``
    is outside 60 s .. 7 days or the name is not a valid agent name.
    """
    if not MIN_TOKEN_TTL_S <= ttl_s <= MAX_TOKEN_TTL_S:
        raise ValueError(f"token lifetime must be between 60 s and 7 days, not {ttl_s} s")
    if name is not None and not _AGENT_NAME_RE.fullmatch(name):
        raise ValueError(invalid_agent_name(name))
    # a fixed prefix: a token starting with '-' would read as an option on a command line
    secret = ENROLLMENT_TOKEN_PREFIX + secrets.token_urlsafe(ENROLLMENT_TOKEN_BYTES)
    created_at = _now(now)
    record = EnrollmentTokenRecord(
        id=uuid.uuid4().hex, name=name, created_at=created_at, expires_at=created_at + ttl_s
    )
    db.execute(
        "INSERT INTO enrollment_tokens (id, token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
        [record.id, _hash_secret(secret), name, record.created_at, record.expires_at],
    )
    return record, secret


def token_state(row: dict[str, Any], now: float) -> TokenState:
    """Whether the token in ``row`` could enroll at ``now``, and if not why."""
    if row["used_at"] is not None:
        return "used"
    if row["revoked_at"] is not None:
        return "revoked"
    return "expired" if row["expires_at"] <= now else "active"


def _token_from_row(row: dict[str, Any], now: float) -> EnrollmentTokenRecord:
    return EnrollmentTokenRecord.model_validate({**row, "state": token_state(row, now)})


def list_enrollment_tokens(db: Database, now: float | None = None) -> list[EnrollmentTokenRecord]:
    """Every enrollment token, used, expired and revoked ones included, oldest first."""
    now = _now(now)
    rows = db.query(f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens ORDER BY created_at, id")
    return [_token_from_row(row, now) for row in rows]


def revoke_enrollment_token(db: Database, token: str, now: float | None = None) -> EnrollmentTokenRecord:
    """Revoke a token that could still enroll; the row stays, so the audit trail can name it.

    ``token`` is its id, or the token itself (``enr_...``): whoever pasted a token where
    it should not be has that text at hand, not the id. Surrounding blanks are ignored.
    Raises `TokenNotRevocable` if no token has this id, or it was used, expired or revoked already.
    """
    now = _now(now)
    token = token.strip()
    by_secret = holds_secret(token)  # an API key's secret too: no token has it, and it is not shown
    column, value = ("token_hash", _hash_secret(token)) if by_secret else ("id", token)
    with write_transaction(db):
        cursor = db.execute(
            f"UPDATE enrollment_tokens SET revoked_at = ? WHERE {column} = ? "
            "AND used_at IS NULL AND revoked_at IS NULL AND expires_at > ?",
            [now, value, now],
        )
        row = query_one(db, f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens WHERE {column} = ?", [value])
    if row is None:
        if by_secret:  # never the token's text, in a message or an audit row
            raise TokenNotRevocable(None, "no such enrollment token")
        raise TokenNotRevocable(None, f"no enrollment token has id {echoed(token)}", token)
    record = _token_from_row(row, now)
    if cursor.rowcount == 1:
        return record
    raise TokenNotRevocable(record.state, _not_revocable(record), record.id)


def _not_revocable(record: EnrollmentTokenRecord) -> str:
    token = f"enrollment token {record.id}"
    if record.used_at is not None:
        return (
            f"{token} was already used at {_iso(record.used_at)} by agent {record.used_by}; "
            "revoking it would change nothing; if that agent should not be enrolled, remove it "
            f"(`sonde hub agent remove {record.used_by}`, or DELETE /api/v1/agents/{record.used_by})"
        )
    if record.revoked_at is not None:
        return f"{token} was already revoked at {_iso(record.revoked_at)}"
    return f"{token} already expired at {_iso(record.expires_at)}; it can enroll nothing, so there is nothing to revoke"


def consume_enrollment_token(
    db: Database, secret: str, agent_name: str, agent_id: str, now: float | None = None
) -> EnrollmentTokenRecord:
    """Mark the token used by ``agent_id``, atomically: of two concurrent callers one wins.

    Raises EnrollmentRefused with code ``unknown_token``, ``token_used``, ``token_revoked``,
    ``token_expired`` or ``token_name_mismatch``.
    """
    now = _now(now)
    if not isinstance(secret, str) or not _TOKEN_RE.fullmatch(secret):
        raise _refusal(None, agent_name, now)
    token_hash = _hash_secret(secret)
    with write_transaction(db):
        cursor = db.execute(
            "UPDATE enrollment_tokens SET used_at = ?, used_by = ? WHERE token_hash = ? "
            "AND used_at IS NULL AND revoked_at IS NULL AND expires_at > ? AND (name IS NULL OR name = ?)",
            [now, agent_id, token_hash, now, agent_name],
        )
        row = query_one(
            db, f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens WHERE token_hash = ?", [token_hash]
        )
    if cursor.rowcount == 1 and row is not None:
        return _token_from_row(row, now)
    raise _refusal(row, agent_name, now)


def peek_enrollment_token(db: Database, secret: str, now: float | None = None) -> str | None:
    """The agent name a usable token is reserved for (None if not reserved), without spending it.

    Raises EnrollmentRefused (``unknown_token``, ``token_used``, ``token_revoked``,
    ``token_expired``) if the token could not be consumed now. Only :func:`consume_enrollment_token` is atomic.
    """
    row = _find_token_row(db, secret)
    problem = _token_problem(row, _now(now))
    if problem is not None:
        raise problem
    assert row is not None
    name: str | None = row["name"]
    return name


def _find_token_row(db: Database, secret: str) -> dict[str, Any] | None:
    if not isinstance(secret, str) or not _TOKEN_RE.fullmatch(secret):
        return None
    return query_one(
        db, f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens WHERE token_hash = ?", [_hash_secret(secret)]
    )


def _refusal(row: dict[str, Any] | None, agent_name: str, now: float) -> EnrollmentRefused:
    """Why the consuming UPDATE matched nothing."""
    problem = _token_problem(row, now)
    if problem is not None:
        return problem
    assert row is not None
    if row["name"] is not None and row["name"] != agent_name:
        return EnrollmentRefused(
            TOKEN_NAME_MISMATCH,
            f"enrollment token is reserved for the agent named {row['name']!r}, not {agent_name!r}",
        )
    return EnrollmentRefused(UNKNOWN_TOKEN, "enrollment token is not known to this hub")


def _token_problem(row: dict[str, Any] | None, now: float) -> EnrollmentRefused | None:
    if row is None:
        return EnrollmentRefused(UNKNOWN_TOKEN, "enrollment token is not known to this hub")
    if row["used_at"] is not None:
        return EnrollmentRefused(
            TOKEN_USED,
            f"enrollment token was already used at {_iso(row['used_at'])}; ask an admin for a new one",
        )
    if row["revoked_at"] is not None:
        return EnrollmentRefused(
            TOKEN_REVOKED,
            f"enrollment token was revoked at {_iso(row['revoked_at'])}; ask an admin for a new one",
        )
    if row["expires_at"] <= now:
        return EnrollmentRefused(
            TOKEN_EXPIRED,
            f"enrollment token expired at {_iso(row['expires_at'])}; ask an admin for a new one",
        )
    return None


# 100000 days (about 273 years): past any TTL or age worth asking for, and past the
# 5-digit day counts query_logs' `since` admits; a bigger one overflows a timestamp
MAX_DURATION_S = 100_000 * 86400.0


def parse_duration(text: str) -> float:
    """Seconds in ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or a bare number of seconds, at most
    `MAX_DURATION_S`.

    Raises ValueError otherwise.
    """
    shown = echoed(text)
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None and _DURATION_RE.fullmatch(text.strip().removeprefix("-")):
        raise ValueError(f"invalid duration {shown}: a duration cannot be negative")
    if match is None:
        raise ValueError(f"invalid duration {shown}: use seconds or a number with s, m, h or d (e.g. 15m)")
    seconds = float(match[1]) * _DURATION_UNIT_S[match[2]]
    if seconds > MAX_DURATION_S:
        raise ValueError(f"duration {shown} is too long: at most 100000d (about 273 years)")
    return seconds

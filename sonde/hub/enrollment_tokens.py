"""Enrollment tokens: single-use secrets an agent enrolls with, stored only as SHA-256 hex.

An admin makes one (optionally reserved for an agent name, valid 60 s .. 7 days); the hub
spends it atomically when an agent enrolls, and an admin may revoke one that could still
enroll. The rows stay (used, expired or revoked) so the audit trail can name them.
"""

from __future__ import annotations

import re
import secrets
import shlex
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlite_utils import Database

from sonde.echo import echoed, holds_secret
from sonde.hub.db import query_one, write_transaction
from sonde.hub.secret_records import hash_secret, now_or
from sonde.hub.utc_times import iso_utc
from sonde.name_rules import invalid_agent_name, secret_shaped
from sonde.protocol.enrollment import TOKEN_PATTERN
from sonde.protocol.names import NAME_PATTERN

TokenState = Literal["active", "used", "expired", "revoked"]  # only an active token enrolls
ENROLLMENT_TOKEN_PREFIX = "enr_"
ENROLLMENT_TOKEN_BYTES = 24
DEFAULT_TOKEN_TTL_S = 900.0
MIN_TOKEN_TTL_S = 60.0
MAX_TOKEN_TTL_S = 7 * 24 * 3600.0

UNKNOWN_TOKEN = "unknown_token"
TOKEN_USED = "token_used"
TOKEN_EXPIRED = "token_expired"
TOKEN_REVOKED = "token_revoked"
TOKEN_NAME_MISMATCH = "token_name_mismatch"

_TOKEN_RE = re.compile(TOKEN_PATTERN)
_AGENT_NAME_RE = re.compile(NAME_PATTERN)
_TOKEN_COLUMNS = "id, name, created_at, expires_at, used_at, used_by, revoked_at"


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
    if name is not None and (refusal := secret_shaped("agent name", name)) is not None:
        raise ValueError(refusal)
    # a fixed prefix: a token starting with '-' would read as an option on a command line
    secret = ENROLLMENT_TOKEN_PREFIX + secrets.token_urlsafe(ENROLLMENT_TOKEN_BYTES)
    created_at = now_or(now)
    record = EnrollmentTokenRecord(
        id=uuid.uuid4().hex, name=name, created_at=created_at, expires_at=created_at + ttl_s
    )
    db.execute(
        "INSERT INTO enrollment_tokens (id, token_hash, name, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
        [record.id, hash_secret(secret), name, record.created_at, record.expires_at],
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
    now = now_or(now)
    rows = db.query(f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens ORDER BY created_at, id")
    return [_token_from_row(row, now) for row in rows]


def revoke_enrollment_token(db: Database, token: str, now: float | None = None) -> EnrollmentTokenRecord:
    """Revoke a token that could still enroll; the row stays, so the audit trail can name it.

    ``token`` is its id, or the token itself (``enr_...``): whoever pasted a token where
    it should not be has that text at hand, not the id. Surrounding blanks are ignored.
    Raises `TokenNotRevocable` if no token has this id, or it was used, expired or revoked already.
    """
    now = now_or(now)
    token = token.strip()
    by_secret = holds_secret(token)  # an API key's secret too: no token has it, and it is not shown
    column, value = ("token_hash", hash_secret(token)) if by_secret else ("id", token)
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
            f"{token} was already used at {iso_utc(record.used_at)} by agent {record.used_by}; "
            "revoking it would change nothing; if that agent should not be enrolled, remove it "
            f"(`sonde hub agent remove {record.used_by}`, or DELETE /api/v1/agents/{record.used_by})"
        )
    if record.revoked_at is not None:
        return f"{token} was already revoked at {iso_utc(record.revoked_at)}"
    return f"{token} already expired at {iso_utc(record.expires_at)}; it can enroll nothing, so there is nothing to revoke"


def consume_enrollment_token(
    db: Database, secret: str, agent_name: str, agent_id: str, now: float | None = None
) -> EnrollmentTokenRecord:
    """Mark the token used by ``agent_id``, atomically: of two concurrent callers one wins.

    Raises EnrollmentRefused with code ``unknown_token``, ``token_used``, ``token_revoked``,
    ``token_expired`` or ``token_name_mismatch``.
    """
    now = now_or(now)
    if not isinstance(secret, str) or not _TOKEN_RE.fullmatch(secret):
        raise _refusal(None, agent_name, now)
    token_hash = hash_secret(secret)
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
    problem = _token_problem(row, now_or(now))
    if problem is not None:
        raise problem
    assert row is not None
    name: str | None = row["name"]
    return name


def _find_token_row(db: Database, secret: str) -> dict[str, Any] | None:
    if not isinstance(secret, str) or not _TOKEN_RE.fullmatch(secret):
        return None
    return query_one(
        db, f"SELECT {_TOKEN_COLUMNS} FROM enrollment_tokens WHERE token_hash = ?", [hash_secret(secret)]
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
            f"enrollment token is reserved for the agent named {row['name']!r}, not {agent_name!r}: "
            f"enroll with `--name {shlex.quote(row['name'])}` (without it, the machine's hostname is the name)",
        )
    return EnrollmentRefused(UNKNOWN_TOKEN, "enrollment token is not known to this hub")


def _token_problem(row: dict[str, Any] | None, now: float) -> EnrollmentRefused | None:
    if row is None:
        return EnrollmentRefused(UNKNOWN_TOKEN, "enrollment token is not known to this hub")
    if row["used_at"] is not None:
        return EnrollmentRefused(
            TOKEN_USED,
            f"enrollment token was already used at {iso_utc(row['used_at'])}; ask an admin for a new one",
        )
    if row["revoked_at"] is not None:
        return EnrollmentRefused(
            TOKEN_REVOKED,
            f"enrollment token was revoked at {iso_utc(row['revoked_at'])}; ask an admin for a new one",
        )
    if row["expires_at"] <= now:
        return EnrollmentRefused(
            TOKEN_EXPIRED,
            f"enrollment token expired at {iso_utc(row['expires_at'])}; ask an admin for a new one",
        )
    return None

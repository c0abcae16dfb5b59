"""The hub's one refusal type, read by both surfaces.

MCP tools turn a `HubError` into a tool error whose text tells the model what
to do next; REST turns it into ``{"error": {"code", "message"}}`` with its
HTTP status. A refusal by the caller's role or policy also carries a `Denial`:
what the audit row of that refusal records (REST writes it; see `sonde.hub.rest`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from pydantic import JsonValue

from sonde.echo import without_secrets


@dataclass(frozen=True)
class Denial:
    """Why an authenticated caller was refused, for its audit row."""

    reason: str  # a reason code: admin_required, agent_not_allowed, probe_not_allowed
    target: str | None  # what the caller asked for (an agent's name, a path)
    detail: dict[str, JsonValue] = field(default_factory=dict)


class HubError(Exception):
    def __init__(
        self,
        message: str,
        code: str = "refused",
        status: int = 400,
        headers: dict[str, str] | None = None,
        denial: Denial | None = None,
    ) -> None:
        message = without_secrets(message)  # a key pasted where a name was due: never said back
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.headers = headers or {}  # for a REST answer (Retry-After)
        self.denial = denial


def not_found(message: str, denial: Denial | None = None) -> HubError:
    return HubError(message, "not_found", 404, denial=denial)


def forbidden(message: str, denial: Denial) -> HubError:
    """A refusal by the caller's role or policy (403): always with the `Denial` its audit row records."""
    return HubError(message, "forbidden", 403, denial=denial)


def unavailable(message: str) -> HubError:
    return HubError(message, "agent_unavailable", 503)


DATABASE_RETRY_AFTER_S = 5


def database_unavailable(locked: bool, cause: str) -> HubError:
    """The refusal of a write the hub's database did not take (503, with Retry-After): nothing changed.

    ``locked``: another process held its write lock (a backup, a ``sqlite3`` shell) longer
    than the hub waits for it; ``cause`` is SQLite's message otherwise (a full disk, say).
    """
    if locked:
        message = (
            "the hub's database is locked by another process (a backup, an sqlite3 shell or another "
            "program holding a write transaction on the hub's sonde.db); nothing was changed; try again"
        )
    else:
        message = (
            f"the hub cannot write its database ({cause}); nothing was changed; "
            "try again once an operator has fixed that (often: free disk space where sonde.db is)"
        )
    return HubError(message, "database_unavailable", 503, {"Retry-After": str(DATABASE_RETRY_AFTER_S)})


# SQLite's primary result codes for a file whose pages are not what SQLite wrote
# (``database disk image is malformed``, ``file is not a database``).
DAMAGED_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
DAMAGED_WORDS = ("malformed", "file is not a database")


def is_damaged_database(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying the database file is damaged (not locked, full or read-only)."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in DAMAGED_CODES  # an extended code keeps the primary one in its low byte
    return any(words in str(exc) for words in DAMAGED_WORDS)


def database_damaged(cause: str) -> HubError:
    """The refusal of anything that reached a damaged part of the hub's database file (503).

    Waiting does not mend it: there is no Retry-After, and the message says what an
    operator must do.
    """
    message = (
        f"the hub's database file (sonde.db in its data directory) is damaged: SQLite says {cause!r}. "
        "An operator must stop the hub, restore sonde.db from a backup, and run `sonde hub audit verify` "
        "before starting the hub again"
    )
    return HubError(message, "database_unavailable", 503)

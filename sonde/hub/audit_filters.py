"""The audit log's filters as people type them, read alike by `sonde hub audit list` and
``GET /api/v1/audit``: a moment as a duration ago (``2h``) or an ISO 8601 time, and an API key by
its id or by its name.

The one difference is a plain number: REST reads it as unix seconds (its first form, kept for the
clients that send one), the CLI refuses it (seconds ago, or a unix time?). Each caller says the
forms it takes in its own words; the parsing and the key lookup are here, once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlite_utils import Database

from sonde.echo import echoed
from sonde.hub.durations import parse_duration

DURATION = re.compile(r"-?\d+(?:\.\d+)?[smhd]")


def time_ago_or_at(text: str, now: float, forms: str) -> float:
    """The unix time ``text`` names: a duration before ``now`` (``2h``), or an ISO 8601 time
    (without a zone, in this machine's local time). ValueError otherwise: a duration's own
    problem (negative, too long), or that ``text`` is neither, naming ``forms`` to give instead."""
    stripped = text.strip()
    if DURATION.fullmatch(stripped):
        return now - parse_duration(stripped)
    try:
        return datetime.fromisoformat(stripped).timestamp()
    except (ValueError, OverflowError, OSError):  # month 13, or a year past the clock's reach
        raise ValueError(f"{echoed(text)} is neither a duration nor a time: give {forms}") from None


@dataclass(frozen=True)
class KeyActor:
    """The actor a key filter names: ``actor`` to match, and ``named`` when a key's name led to it."""

    actor: str
    known: bool  # an API key's id or name; else matched as given (cli, hub, agent), maybe nothing
    named: bool = False


# Who writes audit entries without a key: the admin CLI, the hub itself, agents, callers with no
# valid key, enrollments. A key filter naming one means it; no API key may take one as its name.
NON_KEY_ACTORS = frozenset({"cli", "hub", "agent", "anonymous", "enrollment"})


class AmbiguousKeyName(ValueError):
    """Several API keys have the name a key filter gave; the message names their ids."""


def actor_of(db: Database, key: str) -> KeyActor:
    """The actor ``key`` names: an API key's id or an actor that is no key (cli, hub, agent, ...)
    as given, else the id of the one key so named, else ``key`` as given, not known.
    AmbiguousKeyName for a name several keys have (revoked ones included: each is on the record)."""
    if db.execute("SELECT 1 FROM api_keys WHERE id = ?", [key]).fetchone() or key in NON_KEY_ACTORS:
        return KeyActor(key, known=True)  # a key named so before such names were refused: by its id
    query = "SELECT id FROM api_keys WHERE name = ? ORDER BY created_at"
    named = [str(row[0]) for row in db.execute(query, [key])]
    if len(named) == 1:
        return KeyActor(named[0], known=True, named=True)
    if named:
        raise AmbiguousKeyName(
            f"{len(named)} keys are named {echoed(key)}: give one's id ({', '.join(named)})"
        )
    return KeyActor(key, known=False)

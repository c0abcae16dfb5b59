"""`sonde hub audit list`: the audit log read from the CLI, with the filters of ``GET /api/v1/audit``.

It only reads the database (`open_database_read_only`, as `sonde hub audit verify`), so it runs
beside a hub that goes on writing, and on a read-only backup copy. The rows are REST's
(`query_audit_page`): newest first, the newest ``--limit`` of those that match, and whether older
ones match too. ``--since`` and ``--until`` take a duration ago (``2h``) or a time (ISO 8601), and
``--key`` an API key's id or name, read as REST reads them (`sonde.hub.audit_filters`).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from sonde.echo import clipped, echoed
from sonde.hub.admin import checked_argument, err, existing_database
from sonde.hub.audit_filters import AmbiguousKeyName, actor_of, time_ago_or_at
from sonde.hub.audit_query import MAX_QUERY_LIMIT, query_audit_page
from sonde.hub.db import open_database_read_only
from sonde.hub.utc_times import utc_text

MAX_FILTER_CHARS = 64  # as GET /api/v1/audit takes them
DETAIL_SHOWN_CHARS = 200  # of a row's detail in the table; --json has all of it
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
MOMENT_FORMS = (
    "a duration ago (90s, 15m, 2h, 7d) or a time (2026-01-31T09:15:00Z; without Z, in this machine's "
    "local time)"
)


@dataclass(frozen=True)
class AuditListing:
    """What `sonde hub audit list` was asked for, as typed."""

    agent: str | None = None
    key: str | None = None
    action: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int = 100


def moment(flag: str, text: str, now: float) -> float:
    """The unix time ``text`` names: a duration before ``now``, or an ISO 8601 time. ValueError
    saying which forms there are (a bare number is refused: seconds ago, or a unix time?)."""
    if _NUMBER.fullmatch(text.strip()):
        raise ValueError(f"{flag}: {echoed(text)} needs a unit: give {MOMENT_FORMS}")
    try:
        return time_ago_or_at(text, now, MOMENT_FORMS)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def query_filters(asked: AuditListing, now: float) -> dict[str, Any]:
    """The keyword arguments of `query_audit_page` for ``asked``; ValueError for a usage error."""
    for what, value in (("agent name", asked.agent), ("actor", asked.key), ("action", asked.action)):
        if value is not None:
            checked_argument(what, value, limit=MAX_FILTER_CHARS)
    if not 1 <= asked.limit <= MAX_QUERY_LIMIT:
        raise ValueError(f"--limit must be 1 to {MAX_QUERY_LIMIT}, not {asked.limit}")
    since = None if asked.since is None else moment("--since", asked.since, now)
    until = None if asked.until is None else moment("--until", asked.until, now)
    if since is not None and until is not None and since >= until:
        raise ValueError(
            f"--since ({asked.since}) must come before --until ({asked.until}): the range holds no time"
        )
    return {
        "agent": asked.agent,
        "actor": asked.key,
        "action_prefix": asked.action,
        "since": since,
        "until": until,
        "limit": asked.limit,
    }


def audit_list(data_dir: Path, asked: AuditListing, as_json: bool) -> int:
    """Print the audit rows ``asked`` for, newest first, only reading the database; exit 0 (none
    matching is an empty list), 2 for a bad filter (ValueError, said by `run_admin`)."""
    filters = query_filters(asked, time.time())
    db = open_database_read_only(existing_database(data_dir))
    try:
        known = True
        if asked.key is not None:
            filters["actor"], known = key_actor(db, asked.key)
        rows, more = query_audit_page(db, **filters)
    finally:
        db.close()
    if as_json:
        print(json.dumps({"entries": rows, "truncated": more}, indent=2))
        return 0
    print(f"{'SEQ':>7} {'TIME':20} {'ACTOR':34} {'ACTION':28} {'TARGET':32} {'OUTCOME':9} DETAIL")
    for row in rows:
        print(table_row(row))
    if not rows:
        unknown = (
            ""
            if known
            else f" (no API key has the id or name {echoed(asked.key or '')}: see `sonde hub key list`)"
        )
        err(f"no audit entries match{unknown}")
    elif more:
        err(
            f"(the newest {len(rows)} entries; older entries match too: raise --limit, at most "
            f"{MAX_QUERY_LIMIT}, or narrow it with --since and --until)"
        )
    return 0


def key_actor(db: Database, key: str) -> tuple[str, bool]:
    """The actor ``--key`` names (`actor_of`), and whether it is known; a key found by its name is
    said on stderr. ValueError for a name several keys have, naming their ids."""
    try:
        found = actor_of(db, key)
    except AmbiguousKeyName as exc:
        raise ValueError(f"--key: {exc}") from None
    if found.named:
        err(f"(key {echoed(key)} is id {found.actor}: its entries)")
    return found.actor, found.known


def table_row(row: dict[str, Any]) -> str:
    """One audit row on one line; its detail as compact JSON, cut short (``--json`` has it whole)."""
    detail = json.dumps(row["detail"], separators=(",", ":"), ensure_ascii=False) if row["detail"] else "-"
    return (
        f"{row['seq']:>7} {utc_text(row['ts']):20} {one_line(row['actor']):34} {one_line(row['action']):28} "
        f"{one_line(row['target'] or '-'):32} {one_line(row['outcome']):9} {clipped(one_line(detail), DETAIL_SHOWN_CHARS)}"
    )


def one_line(text: str) -> str:
    """``text`` for a table cell: each character that is not printable escaped as in JSON (no
    line breaks; no C1 control such as CSI, nor a bidirectional override, reaches the terminal:
    an agent's error message can hold them)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in text)

"""Sets of pack descriptions in the hub's database: each stored once, agents naming theirs.

An agent's packs (some 70 KB of descriptions with the built-in packs) were stored in its
row of ``agents``, and SQLite rewrites a whole row on any update: every status change and
the minute's last-seen write rewrote them (564 ms for that write with 2,000 such agents,
against 4 ms without), and every agent of a fleet stored the same text again (150 KB of
file per agent). Since schema version 3 a row names its set (``agents.pack_set``, the hash
of the set's text) and ``pack_sets`` holds each set's text once. A set no agent names any
more is deleted by the change that left it (`drop_unused_pack_set`).

Synchronous over a ``sqlite_utils.Database``, like `sonde.hub.agent_records`.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from sqlite_utils import Database

from sonde.hub.shared_packs import pack_set_id, packs_of_set, packs_text, stored_set_id

log = logging.getLogger(__name__)


def store_pack_set(db: Database, packs: list[Any]) -> str:
    """Store the set ``packs`` unless it is stored already; returns its id."""
    set_id, text = stored_set_id(packs)
    if text is None:  # a set worked out before: stored, unless its last agent has gone since
        if db.execute("SELECT 1 FROM pack_sets WHERE id = ?", [set_id]).fetchone() is not None:
            return set_id
        text = packs_text(packs)
    _insert_set(db, set_id, text)
    return set_id


def _insert_set(db: Database, set_id: str, text: str) -> None:
    db.execute("INSERT OR IGNORE INTO pack_sets (id, packs) VALUES (?, ?)", [set_id, text])


def read_pack_set(db: Database, set_id: str) -> tuple[Any, ...]:
    """The packs of set ``set_id``, as the copies other records share."""
    return packs_of_set(set_id, partial(_stored_text, db))


def _stored_text(db: Database, set_id: str) -> str:
    row = db.execute("SELECT packs FROM pack_sets WHERE id = ?", [set_id]).fetchone()
    if row is None:  # not written by a hub: the agent's next register describes its packs again
        log.warning("the database names a set of packs it does not hold (%s): read as none", set_id)
        return "[]"
    return str(row[0])


def pack_set_of(db: Database, agent_id: str) -> str | None:
    """The id of the set agent ``agent_id`` names, None for an unknown agent."""
    row = db.execute("SELECT pack_set FROM agents WHERE id = ?", [agent_id]).fetchone()
    return None if row is None else str(row[0])


def drop_unused_pack_set(db: Database, set_id: str | None) -> None:
    """Delete set ``set_id`` if no agent names it (after a change away from it)."""
    if set_id is not None:
        db.execute(
            "DELETE FROM pack_sets WHERE id = ? AND NOT EXISTS (SELECT 1 FROM agents WHERE pack_set = ?)",
            [set_id, set_id],
        )


def migrate_to_pack_sets(db: Database) -> None:
    """Schema version 3: move every agent's packs out of its row into ``pack_sets``."""
    db.execute("CREATE TABLE pack_sets (id TEXT PRIMARY KEY, packs TEXT NOT NULL)")
    agent_ids = [row[0] for row in db.execute("SELECT id FROM agents").fetchall()]
    for agent_id in agent_ids:  # one row at a time: all of them at once could be gigabytes
        (text,) = db.execute("SELECT packs FROM agents WHERE id = ?", [agent_id]).fetchone()
        set_id = pack_set_id(text)
        _insert_set(db, set_id, text)  # the text as stored before, not encoded again
        db.execute("UPDATE agents SET packs = ? WHERE id = ?", [set_id, agent_id])
    db.execute("ALTER TABLE agents RENAME COLUMN packs TO pack_set")
    db.execute("CREATE INDEX idx_agents_pack_set ON agents (pack_set)")

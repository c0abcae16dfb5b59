"""How a running hub hears of tags set from the CLI (`sonde hub agent tag`).

REST's `PUT /api/v1/agents/{id}/tags` runs inside the hub, which keeps the new tags at once.
The CLI changes only the database file, where the hub's view of an agent (what key policies
and tag filters read) would keep the old tags until the agent reconnects. Each CLI change
writes its audit row (``cli.agent.tags``, naming the agent) in the same transaction, so that
row is the notice: every `CHECK_TAGS_EVERY_S`, `watch_tag_changes` reads the rows after the
last one it saw (a range of the audit's primary key: nothing else is scanned) and takes each
named agent's stored tags into the fleet.

It runs in `open_hub`'s nursery beside `cut_off_removed_agents` and `watch_accepted_agents`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlite_utils import Database

from sonde.hub.agent_records import get_agent
from sonde.hub.watching import look_every

if TYPE_CHECKING:
    from sonde.hub.core import Hub

log = logging.getLogger(__name__)

CHECK_TAGS_EVERY_S = 2.0  # how soon a hub uses tags set from the CLI
CLI_TAGS_ACTION = "cli.agent.tags"
# how far back the first look reaches: a change committed while the hub loaded its agents is
# still seen (one seen twice changes nothing: the stored tags are taken only when they differ)
LOOK_BACK_S = 30.0


def audit_seq_before(db: Database, ts: float) -> int:
    """The seq of the last audit row made before ``ts`` (0 for none): where a watch starts."""
    row = db.execute("SELECT seq FROM audit WHERE ts < ? ORDER BY ts DESC LIMIT 1", [ts]).fetchone()
    return 0 if row is None else int(row[0])


def tags_set_after(db: Database, after_seq: int) -> tuple[list[str], int]:
    """The names of the agents whose tags the CLI set in audit rows after ``after_seq``, and
    the seq of the last audit row of any action: the next look starts there.

    Read in one snapshot (`Store.read`), so no row at or below that seq commits later (SQLite has one writer,
    and a row's seq is above every one committed before it). Going on from the last tag row
    instead, as before, made each look scan every row written since the hub started, when
    nobody tagged from the CLI: a soak's 380,000 rows took 72 ms every 2 s, growing until a restart.
    """
    rows = db.execute(
        "SELECT target FROM audit WHERE seq > ? AND action = ? ORDER BY seq",
        [after_seq, CLI_TAGS_ACTION],
    ).fetchall()
    (last_seq,) = db.execute("SELECT max(seq) FROM audit").fetchone()
    names = list(dict.fromkeys(str(target) for (target,) in rows if target))
    return names, max(after_seq, last_seq or 0)


def stored_tags(db: Database, agent_ids: list[str]) -> dict[str, list[str]]:
    """The stored tags of each of ``agent_ids`` still enrolled, by id."""
    return {agent_id: record.tags for agent_id in agent_ids if (record := get_agent(db, agent_id))}


async def notice_tag_changes(hub: Hub, after_seq: int) -> tuple[list[str], int]:
    """Take into the fleet the stored tags of each agent the CLI tagged after ``after_seq``;
    returns the names of the agents whose tags changed here, and the seq to go on from."""
    names, last_seq = await hub.store.read(tags_set_after, after_seq)
    held = [record for name in names if (record := hub.fleet.find(name)) is not None]
    tags = await hub.store.read(stored_tags, [record.id for record in held]) if held else {}
    changed = []
    for record in held:
        current = hub.fleet.records.get(record.id)
        # tags changed in the hub while the read ran (REST: `current` differs from `record`) are
        # newer than those read: left alone
        if (
            current is not None
            and current.tags == record.tags
            and record.id in tags
            and current.tags != tags[record.id]
        ):
            hub.fleet.remember(current.model_copy(update={"tags": tags[record.id]}))
            changed.append(record.name)
    return changed, last_seq


async def watch_tag_changes(hub: Hub, every_s: float = CHECK_TAGS_EVERY_S) -> None:
    """Until cancelled, every ``every_s``: `notice_tag_changes` since the last look."""
    after_seq: int | None = None
    since = time.time() - LOOK_BACK_S

    async def look() -> None:
        nonlocal after_seq
        if after_seq is None:  # a first read, made again until it works
            after_seq = await hub.store.read(audit_seq_before, since)
        changed, after_seq = await notice_tag_changes(hub, after_seq)
        for name in changed:
            log.info("agent %s: its tags were set from the CLI; using them now", name)

    await look_every(every_s, "tags set with the CLI", look)

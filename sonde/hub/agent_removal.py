"""Removing an agent: what REST (`DELETE /api/v1/agents/{id}`) and the CLI
(`sonde hub agent remove`) share (the lookup, the audit row; both call `delete_agent`), and how a
running hub hears of the CLI's.

The REST route runs inside the hub, so it tells the fleet at once. The CLI changes
only the database file; no signal crosses from it to the hub, so the hub reads the
revocations made since it last looked every `CHECK_REMOVED_EVERY_S` and cuts off
(`Fleet.forget`) each removed agent it still holds: its connection ends with the
reason, its reconnect is refused, and no caller sees it any more.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sqlite_utils import Database

from sonde.hub.agent_records import AgentRecord, find_agent_by_name, get_agent
from sonde.hub.watching import look_every

if TYPE_CHECKING:
    from sonde.hub.core import Hub

log = logging.getLogger(__name__)

REMOVED_BY_ADMIN = "removed by an admin"  # what the agent is told, and the hub's log says
CHECK_REMOVED_EVERY_S = 2.0
# how far back each look reaches past the previous one: a revocation committed while
# the last look ran (its time taken just before) is still seen
LOOK_BACK_S = 30.0


def find_agent(db: Database, name_or_id: str) -> AgentRecord | None:
    """The agent with this name, else with this id; None if neither."""
    return find_agent_by_name(db, name_or_id) or get_agent(db, name_or_id)


def removal_audit(record: AgentRecord) -> tuple[str, dict[str, Any]]:
    """The target and detail of the audit row of ``record``'s removal, from REST or the CLI alike."""
    return record.name, {"agentId": record.id}


def revoked_since(db: Database, since: float) -> list[str]:
    """The ids of the agents revoked (removed, or replaced by a re-enrollment) at or after ``since``."""
    return [row[0] for row in db.execute("SELECT id FROM revoked_agents WHERE revoked_at >= ?", [since])]


async def cut_off_removed_agents(hub: Hub, every_s: float = CHECK_REMOVED_EVERY_S) -> None:
    """Until cancelled, every ``every_s``: forget and cut off each agent the hub still holds
    that another process (`sonde hub agent remove`) removed from the database."""
    since = time.time() - LOOK_BACK_S

    async def look() -> None:
        nonlocal since
        looked_at = time.time()
        for agent_id in await hub.store.read(revoked_since, since):
            record = hub.fleet.records.get(agent_id)
            if record is not None:
                log.info(
                    "agent %s (%s) was removed from the hub's database: cutting it off", record.name, agent_id
                )
                hub.fleet.forget(agent_id, REMOVED_BY_ADMIN)
        since = looked_at - LOOK_BACK_S

    await look_every(every_s, "agents removed with the CLI", look)

"""Hub admin actions on enrolled agents (`sonde hub agent accept|remove|tag|list`).

Accept an agent's changed attestation, remove an agent (a running hub cuts it off within
seconds), set its tags, list them, on the hub's data directory; each change and its audit row
are written together, or neither.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from sonde.echo import echoed
from sonde.hub.admin import checked_argument, err, open_hub_database, record
from sonde.hub.admin_tags import TagChange, TagsUnchanged, changed_tags
from sonde.hub.db import write_transaction
from sonde.hub.utc_times import utc_text
from sonde.protocol.names import NAME_PATTERN, NAME_RULE

_NAME_RE = re.compile(NAME_PATTERN)
SHOWN_NAMES = 20  # `accept --all` shows this many of the agents it accepted, and counts the rest


def checked_agent(name: str) -> str:
    """``name`` when an agent could have it as its name or id (the hub's ids are names too);
    ValueError (a usage error, exit 2) otherwise, unlike a name no agent has (exit 1)."""
    checked_argument("agent name", name)
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid agent name or id {echoed(name)}: an agent name is {NAME_RULE}")
    return name


def agent_accept(data_dir: Path, name: str | None, every_held: bool = False) -> int:
    """Accept a held agent's new attestation as its baseline (or, ``every_held``, every held
    agent's); 1 when none waits (nothing to accept)."""
    from sonde.hub.agent_records import find_agent_by_name, get_agent
    from sonde.hub.attestation import accept_pending

    if (name is None) != every_held:
        raise ValueError("give one agent's NAME, or --all for every held agent")
    if name is None:
        return accept_every_held(data_dir)
    checked_agent(name)
    db = open_hub_database(data_dir)
    try:
        agent = find_agent_by_name(db, name) or get_agent(db, name)
        if agent is None:
            err(f"no agent named {echoed(name)}")
            return 1
        pending = agent.pending_attestation
        if pending is None:
            err(f"agent {agent.name} has no changed attestation waiting; nothing to accept")
            return 1
        with write_transaction(db):
            accept_pending(db, agent.id)
            record(db, "attestation.accept", agent.name, accepted=pending)
    finally:
        db.close()
    err(f"accepted the new attestation of {agent.name}; its probes run again")
    return 0


def accept_every_held(data_dir: Path) -> int:
    """`sonde hub agent accept --all`: each held agent's claim accepted, with its own audit row."""
    from sonde.hub.agent_records import list_agents
    from sonde.hub.attestation import accept_pending, compare

    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # read in the write: an agent held meanwhile is in it or waits
            held = [(a, claim) for a in list_agents(db) if (claim := a.pending_attestation) is not None]
            for agent, claim in held:
                accept_pending(db, agent.id)
                record(db, "attestation.accept", agent.name, accepted=claim)
    finally:
        db.close()
    if not held:
        err("no agent has a changed attestation waiting; nothing to accept")
        return 1
    err(f"accepted the new attestation of {len(held)} agent(s); their probes run again:")
    for agent, claim in held[:SHOWN_NAMES]:  # what each was held for: the audit rows have it all
        changes = compare(agent.attestation, claim, first_connect=False).changes
        err(f"  {agent.name}: {'; '.join(changes) or 'back to its accepted attestation'}")
    if len(held) > SHOWN_NAMES:
        err(f"  and {len(held) - SHOWN_NAMES} more (`sonde hub audit list --action attestation.accept`)")
    return 0


def agent_remove(data_dir: Path, name: str) -> int:
    """Remove an agent (by name or id), as `DELETE /api/v1/agents/{id}` does: a running hub cuts it
    off within seconds (`sonde.hub.agent_removal`) and refuses its reconnects."""
    from sonde.hub.agent_records import delete_agent
    from sonde.hub.agent_removal import find_agent, removal_audit

    checked_agent(name)
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # the removal and its audit entry, or neither
            agent = find_agent(db, name)
            if agent is not None:
                delete_agent(db, agent.id, time.time())
                target, detail = removal_audit(agent)
                record(db, "cli.agent.remove", target, **detail)
    finally:
        db.close()
    if agent is None:
        err(f"no agent named {echoed(name)} (see `sonde hub agent list`)")
        return 1
    err(
        f"removed agent {agent.name} ({agent.id}); a running hub cuts it off within a few seconds and "
        "refuses it from then on (re-enrolling it needs a new token)"
    )
    return 0


def agent_tag(data_dir: Path, name: str, change: TagChange) -> int:
    """Set, add, remove or clear an agent's tags (by name or id), as `PUT /api/v1/agents/{id}/tags`
    does (normalized by `normalize_tags`), with its audit row (`cli.agent.tags`, REST's facts):
    1 when no agent has that name or ``--remove`` names a tag it lacks (nothing changed then)."""
    from sonde.hub.agent_records import set_tags
    from sonde.hub.agent_removal import find_agent

    checked_agent(name)
    change.check()
    db = open_hub_database(data_dir)
    try:
        with write_transaction(db):  # read, change and record in one transaction: no change lost
            agent = find_agent(db, name)
            if agent is None:
                err(f"no agent named {echoed(name)} (see `sonde hub agent list`)")
                return 1
            tags = changed_tags(agent.name, agent.tags, change)
            updated = set_tags(db, agent.id, tags)
            assert updated is not None  # found in this same transaction
            record(db, "cli.agent.tags", agent.name, tags=updated.tags)
    except TagsUnchanged as unchanged:
        err(str(unchanged))
        return unchanged.exit_code
    finally:
        db.close()
    were = ", ".join(agent.tags) or "none"
    err(
        f"tags of agent {agent.name}: {', '.join(updated.tags) or 'none'} (were: {were}); "
        "a running hub uses them within a few seconds"
    )
    return 0


def agent_list(data_dir: Path, as_json: bool, status: str | None = None) -> int:
    """The agents enrolled with the hub (``status``: only those in it); the status is the last one
    the hub wrote, except that with no hub holding the data directory none is online (as the next
    start records). Every agent is counted, by status, on stderr."""
    from sonde.hub.agent_records import list_agents
    from sonde.hub.data_dir import hub_holds
    from sonde.hub.tools.views import pack_labels

    db = open_hub_database(data_dir, read_only=True)
    try:
        records = list_agents(db)
    finally:
        db.close()
    if hub_holds(data_dir) is False:
        left = [r for r in records if r.status == "online"]
        if left:  # a hub that was killed: its last word stands in the file until a hub starts
            err(
                f"no hub is running on {data_dir}: none of its agents is online (last seen: when it last heard of each)"
            )
            records = [r.model_copy(update={"status": "offline"}) if r in left else r for r in records]
    counts = Counter[str](r.status for r in records)
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    err(
        f"{len(records)} agent(s): {by_status}"
        + (f"; {counts[status]} listed, those {status}" if status else "")
    )
    records = [r for r in records if status is None or r.status == status]
    if as_json:
        # its packs as `name@version`, as GET /api/v1/agents lists them (not every probe's descriptor)
        listed = [{**r.model_dump(mode="json", exclude={"packs"}), "packs": pack_labels(r)} for r in records]
        print(json.dumps(listed, indent=2))
        return 0
    print(f"{'NAME':24} {'ID':34} {'STATUS':9} {'LAST SEEN':20} TAGS")
    for r in records:
        seen = utc_text(r.last_seen) if r.last_seen else "never"
        print(f"{r.name[:24]:24} {r.id:34} {r.status:9} {seen:20} {', '.join(r.tags) or '-'}")
    return 0

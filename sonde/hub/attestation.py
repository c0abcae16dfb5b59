"""Attestation: does what an agent says about itself match what was accepted?

At enrollment the agent's attestation becomes its baseline. On every
connect the new one is compared:

- a new agent version explains a new code hash and new pack versions: the
  baseline moves forward (recorded in the audit log);
- an OS or kernel change (an upgrade and reboot) moves the baseline forward too;
- a different code hash under the same agent version, or packs added or
  removed without a version change, is unexplained: the agent is held as
  ``degraded``, the old baseline is kept, and its probes are refused until an
  admin accepts the new state; the hold is audited and logged as a warning (what changed,
  the command that accepts it); reconnecting with the same claim while held changes
  nothing and is not audited nor logged again (a churning agent cannot flood the audit
  log), a different claim is held, audited and logged anew (the accepted one again too, said
  so, and a new agent version too: a mismatch seen is an admin's to clear, and an agent
  that claimed an upgrade lifted its own hold);
- the first connect after enrollment sets the baseline (no false alarm even
  if the packs detected at start differ from those at enrollment).

An admin accepts a held claim through the hub (REST, `accept_held`: the stored status
becomes ``online`` or ``offline`` as the agent is connected or not) or from the CLI, in the
database file (`accept_pending`, which cannot know and writes ``offline``): a running hub
notices within `CHECK_ACCEPTED_EVERY_S` and records a connected agent ``online``.
"""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sonde.hub.agent_records import AgentRecord, get_agent, update_agent
from sonde.hub.audit import AuditEntry, audit_entry
from sonde.hub.config import default_data_dir
from sonde.hub.connection_lines import LINES
from sonde.hub.watching import look_every

if TYPE_CHECKING:
    from sonde.hub.core import Hub

log = logging.getLogger(__name__)

Verdict = Literal["same", "first", "upgraded", "unexplained"]
# what an attestation's check, hold or accept writes of an agent's record (`Fleet.keep_fields`)
ATTESTATION_FIELDS = ("attestation", "pending_attestation", "status")
CHECK_ACCEPTED_EVERY_S = 2.0  # how soon a hub hears of an accept made from the CLI
# A held agent back on its accepted claim stays held (a mismatch is for an admin to clear): said so
BACK_WHILE_HELD = "back to its accepted attestation after an unexplained change, still held"
# Sonde installed again from another build of the same version changes the code hash and not the
# version (a fleet upgraded from a source checkout); so do files changed behind the package manager
SAME_VERSION_HINT = (
    ". Its code changed under the same version: Sonde installed again there from another build of "
    "that version does that, and so do changed files; accept it once you know which"
)


@dataclass(frozen=True)
class Comparison:
    verdict: Verdict
    changes: list[str]


def compare(baseline: dict[str, Any] | None, current: dict[str, Any], first_connect: bool) -> Comparison:
    """Pure: classify the difference between the accepted baseline and the agent's claim."""
    if baseline is None or first_connect:
        return Comparison("first", [])
    changes = [
        f"{key}: {baseline.get(key)!r} -> {current.get(key)!r}"
        for key in ("agentVersion", "codeHash", "os", "kernel")
        if baseline.get(key) != current.get(key)
    ]
    old_packs, new_packs = baseline.get("packs", {}), current.get("packs", {})
    if old_packs != new_packs:
        changes.append(f"packs: {old_packs} -> {new_packs}")
    if not changes:
        return Comparison("same", [])
    if baseline.get("agentVersion") != current.get("agentVersion"):
        return Comparison("upgraded", changes)
    if baseline.get("codeHash") != current.get("codeHash") or set(old_packs) != set(new_packs):
        return Comparison("unexplained", changes)
    return Comparison("upgraded", changes)  # OS, kernel or a pack's own version moved


async def check_attestation(hub: Hub, record: AgentRecord, claimed: dict[str, Any]) -> AgentRecord:
    """Apply the rules above; returns the agent's updated record."""
    result = compare(record.attestation, claimed, first_connect=record.last_seen is None)
    if record.status == "degraded":  # held: only an admin's accept clears it, whatever is claimed
        if record.pending_attestation == claimed:
            return record  # held for this very claim already: audited once, when first made
        return await hold(hub, record, claimed, result.changes or [BACK_WHILE_HELD])
    if result.verdict == "same":
        return record
    if result.verdict == "unexplained":
        return await hold(hub, record, claimed, result.changes)
    # A baseline taken at connect (the first, or an upgrade) is the agent's own claim, not an
    # admin's change, and whole fleets reconnect at once: it is group-committed with the others
    # and its entry batched (`AuditQueue`), as calls' are. One by one with its entry
    # (`Hub.write_audited`), 1,000 connects cost the hub a third more CPU for seconds after.
    updated = await hub.store.write(update_agent, record.id, attestation=claimed, pending_attestation=None)
    await hub.audit(
        "hub", f"attestation.{result.verdict}", record.name, "ok", detail={"changes": result.changes}
    )
    return updated or record


async def hold(hub: Hub, record: AgentRecord, claimed: dict[str, Any], changes: list[str]) -> AgentRecord:
    """Hold ``record`` as degraded for the new claim ``claimed``: stored, audited and logged once
    (a reconnect with the same claim never comes here)."""
    entry = audit_entry("hub", "attestation.held", record.name, "degraded", detail={"changes": changes})
    updated = await hub.write_audited(
        lambda db: update_agent(db, record.id, status="degraded", pending_attestation=claimed),
        lambda _: entry,
    )
    # what agent_overview's pending_changes will say: the claim against the accepted baseline
    pending = compare(record.attestation, claimed, first_connect=False).changes or changes
    if record.id == hub.local_agent_id:  # `sonde up` accepts it at once, and says so
        return updated or record
    LINES.say(
        "held",
        log,
        logging.WARNING,
        "agent %s is held as degraded: its attestation changed since it was accepted (%s), and its "
        "probes are refused until an admin accepts it: `%s`%s",
        record.name,
        "; ".join(pending),
        accept_command(hub, record.name),
        SAME_VERSION_HINT if any(change.startswith("codeHash:") for change in pending) else "",
    )
    return updated or record


def accept_command(hub: Hub, name: str) -> str:
    """The command that accepts ``name``'s held claim on this hub's data directory."""
    data_dir = hub.config.data_dir
    where = "" if data_dir == default_data_dir() else f" --data-dir {shlex.quote(str(data_dir))}"
    return f"sonde hub agent accept {name}{where}"


def accept_pending(db: Any, agent_id: str, *, connected: bool = False) -> AgentRecord | None:
    """Make the held attestation the new baseline (store op: runs in the writer or the CLI).

    The agent is no longer held: its status becomes ``online`` if it is ``connected`` (only a
    running hub knows), else ``offline``. The CLI cannot know, and says ``offline``: true when
    no hub runs, and a running hub corrects it within seconds (`watch_accepted_agents`).
    """
    record = get_agent(db, agent_id)
    if record is None:
        return None
    if record.pending_attestation is None:
        return record
    status = "online" if connected else "offline"
    return update_agent(
        db, agent_id, attestation=record.pending_attestation, pending_attestation=None, status=status
    )


async def accept_held(hub: Hub, record: AgentRecord, actor: str) -> tuple[AgentRecord, bool] | None:
    """Accept ``record``'s held attestation in a running hub (audited as ``actor``, with the
    claim held when the accept was written: one from the CLI may have come first). Returns the
    record as written and whether this accept found a claim held; None if the agent was removed
    meanwhile."""
    # a link that ends meanwhile queues its own status write after this one (`Fleet.detach`)
    connected = record.id in hub.fleet.sessions

    def accept(db: Any) -> tuple[AgentRecord | None, dict[str, Any] | None]:
        """The record as written, and the claim it held just before (read in the same transaction)."""
        before = get_agent(db, record.id)
        held = before.pending_attestation if before else None
        return accept_pending(db, record.id, connected=connected), held

    def entry_for(result: tuple[AgentRecord | None, dict[str, Any] | None]) -> AuditEntry | None:
        updated, held = result
        if updated is None:
            return None
        outcome = "ok" if held is not None else "nothing_pending"
        return audit_entry(actor, "attestation.accept", record.name, outcome, detail={"accepted": held})

    updated, held = await hub.write_audited(accept, entry_for)
    if updated is None:
        return None
    hub.fleet.keep_fields(updated, *ATTESTATION_FIELDS)
    return updated, held is not None


def agents_by_id(db: Any, agent_ids: list[str]) -> list[AgentRecord]:
    """The stored records of those of ``agent_ids`` still enrolled."""
    return [record for agent_id in agent_ids if (record := get_agent(db, agent_id)) is not None]


async def notice_accepted_agents(hub: Hub) -> list[str]:
    """Make the hub's view and the stored status true after accepts made from the CLI (in the
    file, writing ``offline``): re-read each agent the fleet holds as degraded and keep the
    ones accepted meanwhile as stored; then record ``online`` each connected agent kept as
    ``offline`` (so, or re-read by a view that lists agents, `sonde.hub.probing`). Returns
    the names of the accepted agents noticed here."""
    held = {agent_id: record for agent_id, record in hub.fleet.records.items() if record.status == "degraded"}
    accepted = []
    stored = await hub.store.read(agents_by_id, list(held)) if held else []
    for fresh in stored:
        # still held, or changed meanwhile (held anew on a reconnect, removed): left as it is
        if fresh.status != "degraded" and hub.fleet.records.get(fresh.id) is held[fresh.id]:
            hub.fleet.remember(fresh)
            accepted.append(fresh.name)
    for agent_id in list(hub.fleet.sessions):
        record = hub.fleet.records.get(agent_id)
        if record is not None and record.status == "offline" and agent_id in hub.fleet.sessions:
            await hub.fleet.update(agent_id, status="online")
    return accepted


async def watch_accepted_agents(hub: Hub, every_s: float = CHECK_ACCEPTED_EVERY_S) -> None:
    """Until cancelled, every ``every_s``: `notice_accepted_agents`.

    The CLI's accept changes the file, not this process, and writes ``offline`` (it cannot
    know the agent is connected): the hub makes the stored status true again.
    """

    async def look() -> None:
        for name in await notice_accepted_agents(hub):
            log.info(
                "agent %s: its changed attestation was accepted (from the CLI); its probes run again", name
            )

    await look_every(every_s, "attestations accepted with the CLI", look)

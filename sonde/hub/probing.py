"""Running probes for a caller: policy, validation, routing, audit.

Every surface (the `probe` tool, `POST /api/v1/probe`, runbooks inside
`health_check` and `diagnose`) goes through `run_probe_for`, so the policy
and the audit record are the same whichever door a call came in by.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from pydantic import JsonValue, ValidationError

from sonde.echo import clipped, echoed
from sonde.hub.agent_records import AgentRecord, get_agent
from sonde.hub.errors import Denial, HubError, forbidden, not_found, unavailable
from sonde.hub.fleet import degraded_reason
from sonde.hub.policy import has_tags
from sonde.params_words import describe_params_error
from sonde.protocol.errors import AgentUnavailable, ProbeFailed, ProbeTimeout

if TYPE_CHECKING:
    from sonde.hub.auth import Caller
    from sonde.hub.core import Hub


@dataclass(frozen=True)
class Reading:
    """One probe's answer, as the hub returns it."""

    agent: str
    agent_id: str
    probe: str
    result: dict[str, JsonValue]
    duration_ms: float
    truncated: bool
    redactions: int


# The most of an agent's own error message an answer passes on (it may quote the params it was sent).
AGENT_ERROR_CHARS = 1000


def visible_agents(hub: Hub, caller: Caller, tags: list[str] | None = None) -> list[AgentRecord]:
    """The agents this caller may see, filtered by tags (AND), sorted by name."""
    records = sorted(hub.fleet.records.values(), key=lambda r: r.name)
    return [r for r in records if _sees(caller, r, tags)]


def _sees(caller: Caller, record: AgentRecord, tags: list[str] | None) -> bool:
    return caller.allows_agent(record.name, record.tags) and has_tags(record.tags, tags or [])


def resolve_agent(hub: Hub, caller: Caller, agent: str) -> AgentRecord:
    """The agent named (or with id) ``agent`` if this caller may see it; else a not-found listing the choices.

    An agent outside the caller's policy is reported exactly like one that does not exist.
    """
    record = hub.fleet.find(agent)
    if record is None or not caller.allows_agent(record.name, record.tags):
        hidden = None if record is None else Denial("agent_not_allowed", record.name, {"agentId": record.id})
        raise not_found(f"Unknown agent {echoed(agent)}. {reachable_names(hub, caller, agent)}", hidden)
    return record


NAMES_SHOWN = 20  # of the agents a caller can reach, in an unknown agent's refusal
NAMES_COMPARED = 2000  # at most, for the closest: a typo must not cost the hub a fleet's worth of work


def reachable_names(hub: Hub, caller: Caller, wanted: str) -> str:
    """The agents ``caller`` can reach, for a refusal of ``wanted``: all of a few; of many, how many
    and the names closest to ``wanted`` (those sharing its start first), with how to find one."""
    names = [r.name for r in visible_agents(hub, caller)]
    if len(names) <= NAMES_SHOWN:
        return f"Agents you can reach: {', '.join(names) or 'none'}. Call list_agents for details."
    alike = [name for name in names if name[:3] == wanted[:3]] or names
    closest = difflib.get_close_matches(wanted, alike[:NAMES_COMPARED], n=5, cutoff=0.5)
    near = f"; the closest names: {', '.join(closest)}" if closest else ""
    return (
        f"You can reach {len(names)} agents{near}. Call list_agents with name (a glob, such as "
        f"{echoed(wanted[:3] + '*')}) to find the one you mean."
    )


def agent_probes(record: AgentRecord) -> dict[str, dict[str, Any]]:
    """Probe descriptors the agent registered, by name."""
    return {p["name"]: p for pack in record.packs for p in pack.get("probes", [])}


def pack_not_run(hub: Hub, record: AgentRecord, probe: str) -> str:
    """Why a probe of a pack the hub knows is missing on an agent that does not run that pack
    (a sentence, with a leading blank); empty otherwise. The agent leaves out a pack that is
    not installed, or one that does not apply there (systemd without systemd as init, say)."""
    pack = probe.split(".", 1)[0]
    if pack not in hub.packs.packs or any(p.get("name") == pack for p in record.packs):
        return ""
    return (
        f" Agent {record.name} does not run the {pack} pack: it is not installed there, or it does not "
        f"apply (`sonde packs list` on {record.name} says why)."
    )


def older_pack(hub: Hub, record: AgentRecord, probe: str) -> str:
    """Why an agent that runs ``probe``'s pack lacks it while the hub's copy of that pack has it:
    its copy is older (a rolling upgrade). Empty when that is not the case. Lower case, no period:
    the reason of a runbook step not run there, or a sentence inside a refusal."""
    pack = probe.split(".", 1)[0]
    theirs = next((p for p in record.packs if p.get("name") == pack), None)
    if theirs is None or hub.packs.probe(probe) is None:
        return ""
    return (
        f"its {pack} pack ({clipped(str(theirs.get('version', '?')), 32)}) does not have {probe}, the hub's "
        f"({hub.packs.packs[pack].version}) does: an older Sonde or {pack} pack runs there; "
        f"upgrade it on {record.name}"
    )


def check_probe(hub: Hub, caller: Caller, record: AgentRecord, probe: str, params: dict[str, Any]) -> None:
    """Refuse a probe the policy forbids, the agent lacks, or whose params are invalid.

    The policy comes first: a probe outside it is refused alike whether the agent has it or not,
    and an unknown probe's answer lists only the probes the key may run (as list_capabilities
    and GET /api/v1/packs show them), so no answer names a probe hidden from the key.
    """
    if not caller.allows_probe(probe):
        raise forbidden(
            f"Your API key's policy does not allow probe {echoed(probe)} ({caller.policy.describe()}).",
            Denial("probe_not_allowed", record.name, {"agentId": record.id, "probe": probe}),
        )
    offered = agent_probes(record)
    if probe not in offered:
        available = sorted(name for name in offered if caller.allows_probe(name))
        older = older_pack(hub, record, probe)
        why = f" {capitalized(older)}." if older else pack_not_run(hub, record, probe)
        close = difflib.get_close_matches(probe, available, n=1)
        meant = f" Did you mean {close[0]}?" if close and not why else ""  # a typo, not a pack's absence
        raise not_found(
            f"Unknown probe {echoed(probe)} on agent {record.name}.{why}{meant} "
            f"Available: {', '.join(available) or 'none'}. "
            f"Call {schema_call(close or ['<name>'])} for its parameters."
        )
    spec = hub.packs.probe(probe)
    if spec is not None:  # a pack the hub does not have: the agent validates
        try:
            spec.params.model_validate(params)
        except ValidationError as exc:
            raise HubError(
                f"Invalid params for {probe}: {describe_params_error(exc, spec.params)}. "
                f"Call {schema_call([probe])} for its parameter schema.",
                "invalid_params",
            ) from None


def probe_deadline_s(hub: Hub, probe: str) -> float:
    """How long ``probe`` may run: the hub's probe timeout, or the probe's own when it is shorter
    (the agent stops it then); the hub's alone for a probe of a pack the hub does not have."""
    spec = hub.packs.probe(probe)
    limit = hub.config.probe_timeout_s
    return limit if spec is None else min(limit, spec.timeout_s)


def schema_call(probes: list[str]) -> str:
    """The `list_capabilities` call that answers these probes' parameter schemas, as a model writes it."""
    return f"list_capabilities(probes={json.dumps(probes)})"


async def refresh_record(hub: Hub, record: AgentRecord) -> AgentRecord:
    """``record`` as the database has it now, kept in the fleet; but if the hub changed the
    record while this read ran (an accept, a hold, a removal), what it holds now is newer than
    what was read, and is kept: a read that began before an accept must not put the agent back
    on hold."""
    before = hub.fleet.records.get(record.id)
    fresh = await hub.store.read(get_agent, record.id)
    now = hub.fleet.records.get(record.id)
    if now is not before:
        return now or record
    if fresh is None:
        return record
    hub.fleet.remember(fresh)
    return fresh


async def current_status(hub: Hub, record: AgentRecord) -> tuple[AgentRecord, str]:
    """The agent's record and status (online, offline, degraded), re-read when it is held:
    an admin may have accepted it from the CLI, which changes the file, not this process."""
    if hub.fleet.status(record.id) == "degraded":
        record = await refresh_record(hub, record)
    return record, hub.fleet.status(record.id)


async def visible_agents_now(hub: Hub, caller: Caller, tags: list[str] | None = None) -> list[AgentRecord]:
    """`visible_agents`, with each held agent re-read (`current_status`): the views that list agents."""
    records = [(await current_status(hub, record))[0] for record in visible_agents(hub, caller, tags)]
    # a held agent re-read may carry tags changed from the CLI: judged again on those
    return [record for record in records if _sees(caller, record, tags)]


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def held(record: AgentRecord) -> HubError:
    """The refusal for an agent held as degraded (409), for every tool that would run its probes."""
    return HubError(f"{capitalized(degraded_reason(record.name))}.", "agent_degraded", 409)


async def run_probe_for(
    hub: Hub,
    caller: Caller,
    record: AgentRecord,
    probe: str,
    params: dict[str, Any],
    *,
    via: str = "mcp.probe",
    timeout_s: float | None = None,
    fan_out: bool = False,
) -> Reading:
    """Check, run and audit one probe (``fan_out``: one of many the call runs, which take turns
    with other keys', `Fleet.run_probe`); raises `HubError` with a next step on any failure."""
    check_probe(hub, caller, record, probe, params)
    record, status = await current_status(hub, record)
    if status == "degraded":
        raise held(record)
    started = time.perf_counter()
    outcome, error = "ok", ""
    try:
        response = await hub.fleet.run_probe(
            record.id,
            probe,
            params,
            timeout_s or hub.config.probe_timeout_s,
            admin=caller.is_admin,
            fan_out_of=caller.key_id if fan_out else None,
        )
    except (AgentUnavailable, ProbeTimeout) as exc:
        outcome, error = "error", str(exc)
        raise unavailable(f"{exc}. {what_next(hub)}") from None
    except ProbeFailed as exc:
        outcome, error = "error", f"{exc.code}: {exc.message}"
        message = clipped(exc.message, AGENT_ERROR_CHARS)
        raise HubError(
            f"Probe {probe} failed on {record.name} ({exc.code}): {message}", exc.code, 502
        ) from None
    except trio.Cancelled:
        outcome, error = "cancelled", "the caller went away or the deadline passed"
        raise
    finally:
        with trio.CancelScope(shield=True):
            await hub.audit(
                caller.key_id,
                via,
                record.name,
                outcome,
                duration_ms=(time.perf_counter() - started) * 1000,
                detail={"agentId": record.id, "probe": probe, "params": params, "error": error},
            )
    payload = response.payload
    return Reading(
        agent=record.name,
        agent_id=record.id,
        probe=probe,
        result=payload.result,
        duration_ms=payload.duration_ms,
        truncated=payload.meta.truncated,
        redactions=payload.meta.redactions,
    )


def what_next(hub: Hub) -> str:
    """What a caller whose probe found its agent gone can do: another agent, unless the hub itself
    is stopping, which leaves none."""
    if hub.fleet.closing is not None:
        return "Every agent is cut off while the hub stops: call again once it is back."
    return "Check list_agents for its status, or try another agent."

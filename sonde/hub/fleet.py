"""The live fleet: which agents are connected, and probes routed to them.

`Fleet` keeps every enrolled agent's record in memory (the store is the
source of truth, written through) and one `AgentSession` per connected agent.
A probe goes out on that session's link; when the link dies its pending
probes fail at once with `AgentUnavailable`. It also remembers, in memory
only, each enrolled agent's last refused connection attempt since it was last
accepted (`Refusal`: one per agent, dropped with the agent), so an agent the
hub keeps refusing (its clock, its key) does not look like one that never tried.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import trio

from sonde.hub.agent_records import (
    AgentRecord,
    mend_statuses,
    record_departures,
    record_last_seen,
    update_agent,
)
from sonde.hub.agent_session import AgentSession
from sonde.hub.fan_out_places import HubPlaces
from sonde.hub.register_replays import RegisterReplays
from sonde.hub.store import Store, StoreClosed
from sonde.hub.utc_times import iso_utc
from sonde.protocol.errors import REPLACED_BY_NEWER_CONNECTION, AgentUnavailable, ProbeTimeout
from sonde.protocol.messages import (
    AgentHeartbeat,
    Message,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
)
from sonde.transport import CLOSE_GOING_AWAY

log = logging.getLogger(__name__)


REFUSAL_REASON_CHARS = 300  # a remembered refusal's reason is cut to this


@dataclass(frozen=True)
class Refusal:
    """An enrolled agent's refused connection attempt: when (epoch seconds), why, from where."""

    at: float
    reason: str
    peer: str


def degraded_reason(name: str) -> str:
    return (
        f"agent {name} is held as degraded: its attestation changed since it was accepted; "
        f"an admin must accept it (`sonde hub agent accept {name}`) before it runs probes"
    )


REMOVED_BY_ADMIN = "this agent was removed by an admin"  # when no revocation reason is stored
ADMIN_RESERVED_SHARE = 8  # an eighth of each agent's probe slots (8 of 64) are kept for admin keys


class Fleet:
    def __init__(
        self, store: Store, records: Iterable[AgentRecord], max_in_flight_per_agent: int = 64
    ) -> None:
        self.store = store
        self.records: dict[str, AgentRecord] = {r.id: r for r in records}
        self._ids_by_name: dict[str, str] = {r.name: r.id for r in self.records.values()}
        self.sessions: dict[str, AgentSession] = {}
        self.max_in_flight_per_agent = max_in_flight_per_agent
        self.admin_reserved_slots = max_in_flight_per_agent // ADMIN_RESERVED_SHARE
        self.fan_out_places = HubPlaces()
        self.register_replays = RegisterReplays()
        self._refusals: dict[str, Refusal] = {}  # by agent id; only enrolled agents, one each
        self._changed = trio.Condition()
        self.closing: str | None = None  # why no agent is admitted any more (the hub is stopping)
        # agent id: last seen, of each connection ended once `closing` was set (`record_departures`)
        self._departed: dict[str, float] = {}

    # --- lookup ----------------------------------------------------------

    def find(self, name_or_id: str) -> AgentRecord | None:
        record = self.records.get(name_or_id)
        if record is not None:
            return record
        agent_id = self._ids_by_name.get(name_or_id)
        return self.records.get(agent_id) if agent_id is not None else None

    def status(self, agent_id: str) -> str:
        record = self.records.get(agent_id)
        if record is not None and record.status == "degraded":
            return "degraded"
        return "online" if agent_id in self.sessions else "offline"

    def last_seen(self, agent_id: str) -> float | None:
        session = self.sessions.get(agent_id)
        if session is not None:
            return session.last_seen
        record = self.records.get(agent_id)
        return record.last_seen if record else None

    def last_refusal(self, agent_id: str) -> Refusal | None:
        """The agent's last refused connection attempt since it was last accepted, if any."""
        return self._refusals.get(agent_id)

    def note_refusal(self, agent_id: str, reason: str, peer: str) -> None:
        """Remember that a connection as ``agent_id`` was refused now (only for an enrolled agent).

        Kept in memory only, one per agent, until it connects or is forgotten. Whoever opens a
        socket can claim an agent's id, so ``peer`` says where the attempt came from.
        """
        if agent_id in self.records:
            cut = reason if len(reason) <= REFUSAL_REASON_CHARS else reason[: REFUSAL_REASON_CHARS - 1] + "…"
            self._refusals[agent_id] = Refusal(time.time(), cut, peer)

    # --- records ---------------------------------------------------------

    def remember(self, record: AgentRecord) -> None:
        """Keep ``record``; an older agent under its name (re-enrolled) is forgotten and cut off."""
        other = self._ids_by_name.get(record.name)
        if other is not None and other != record.id:
            self.forget(other, f"the name {record.name} was enrolled again, by a new identity")
        self.records[record.id] = record
        self._ids_by_name[record.name] = record.id

    def keep_fields(self, record: AgentRecord, *names: str) -> None:
        """Take ``names`` of ``record`` (what a write returned) into the record the fleet holds now,
        not the whole of it: the rest may have changed in memory while the write ran (a connect
        kept the agent's packs). Nothing is kept for an agent forgotten meanwhile."""
        current = self.records.get(record.id)
        if current is not None:
            self.records[record.id] = current.model_copy(
                update={name: getattr(record, name) for name in names}
            )

    def forget(self, agent_id: str, reason: str) -> None:
        """Drop the agent and end its connection, telling it ``reason``."""
        record = self.records.pop(agent_id, None)
        self._refusals.pop(agent_id, None)
        if record is not None and self._ids_by_name.get(record.name) == agent_id:
            del self._ids_by_name[record.name]
        session = self.sessions.get(agent_id)
        if session is not None:
            session.end(reason)

    async def update(self, agent_id: str, **fields: Any) -> None:
        record = self.records.get(agent_id)
        if record is None:
            return
        self.records[agent_id] = record.model_copy(update=fields)
        await self.store.submit(update_agent, agent_id, **fields)

    # --- sessions --------------------------------------------------------

    def close_all(self, reason: str) -> None:
        """End every agent's connection, telling it ``reason``, and admit none from now on.

        Their pending probes fail at once with `AgentUnavailable` naming ``reason``, so
        the callers waiting on them are answered while the server can still answer.
        """
        self.closing = reason
        for session in list(self.sessions.values()):
            session.end(reason, CLOSE_GOING_AWAY)  # the agent reconnects without its backoff's growth

    async def attach(self, session: AgentSession) -> AgentSession | None:
        """Make ``session`` the agent's live connection, replacing an older one (returned).

        Once `close_all` ran, ``session`` is ended instead (a connection that raced it).
        """
        if self.closing is not None:
            session.end(self.closing, CLOSE_GOING_AWAY)
            return None
        if session.agent_id not in self.records:  # removed while it connected
            session.end(REMOVED_BY_ADMIN)
            return None
        old = self.sessions.get(session.agent_id)
        if old is not None:
            log.info(
                "agent %s reconnected from %s; closing its previous connection, from %s",
                session.agent_id,
                session.peer,
                old.peer,
            )
            old.end(f"{REPLACED_BY_NEWER_CONNECTION} (if this repeats, two agents run with one identity)")
        self.sessions[session.agent_id] = session
        self._refusals.pop(session.agent_id, None)
        reg = session.register
        record = self.records.get(session.agent_id)
        # the same packs as last time are not written again (a set is tens of KB)
        changed = {} if record is not None and record.packs == session.packs else {"packs": session.packs}
        await self.update(
            session.agent_id,
            status="online" if self.status(session.agent_id) != "degraded" else "degraded",
            last_seen=session.connected_at,
            hostname=reg.hostname,
            os=reg.os,
            os_version=reg.os_version,
            kernel=reg.kernel,
            arch=reg.arch,
            agent_version=reg.agent_version,
            **changed,
        )
        await self._notify()
        return old

    async def detach(self, session: AgentSession) -> None:
        if self.sessions.get(session.agent_id) is not session:
            return  # already replaced by a newer connection
        del self.sessions[session.agent_id]
        record = self.records.get(session.agent_id)
        if record is not None:
            status = "degraded" if self.status(session.agent_id) == "degraded" else "offline"
            if self.closing is None:
                await self.update(session.agent_id, status=status, last_seen=session.last_seen)
            else:  # the hub is stopping: one write for them all, as they may be thousands
                self.records[session.agent_id] = record.model_copy(
                    update={"status": status, "last_seen": session.last_seen}
                )
                self._departed[session.agent_id] = session.last_seen
        await self._notify()

    async def record_departures(self) -> None:
        """Store what `detach` kept back while the hub stopped: every agent it closed, in one op.

        One `update_agent` per agent took the store's writer about a millisecond each and held
        up the hub's exit with thousands connected (10,000 agents: 45 s from SIGTERM to exit).
        """
        if not self._departed:
            return
        log.info("shutting down: %d agent connection(s) closed", len(self._departed))
        departed, self._departed = self._departed, {}
        try:
            await self.store.submit(record_departures, departed)
        except StoreClosed:  # the next start records them offline anyway (`mark_all_offline`)
            log.warning(
                "the last-seen times of %d agent(s) were not written: the store closed", len(departed)
            )

    async def keep_last_seen_written(self, every_s: float) -> None:
        """Every ``every_s``, store when each connected agent was last heard from, in one op,
        and mend a stored status a failed write left wrong (`mend_statuses`).

        The database otherwise holds a connected agent's connect time until it goes: after a
        crash or a power cut (no `detach` ran), an agent that never came back would read as
        last seen then, not up to ``every_s`` before the hub went down. Runs until cancelled.
        """
        while True:
            await trio.sleep(every_s)
            if self.closing is not None:
                continue
            seen = {agent_id: session.last_seen for agent_id, session in self.sessions.items()}
            if seen:
                await self.store.submit(record_last_seen, seen)  # a failure is logged by the store
            # the connected agents now, not before the await: one that connected meanwhile would be
            # stored offline (its own write queued before this one)
            online = [agent_id for agent_id in self.sessions if self.status(agent_id) == "online"]
            await self.store.submit(mend_statuses, online)  # what a failed write left behind

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_changed(self) -> None:
        async with self._changed:
            await self._changed.wait()

    def message_handler(self, session_ref: list[AgentSession]) -> Any:
        """The ``on_message`` of an agent's link: heartbeats refresh liveness."""

        async def on_message(message: Message) -> None:
            if not session_ref:
                return
            session = session_ref[0]
            session.last_seen = time.time()
            if isinstance(message, AgentHeartbeat):
                session.probes_in_flight = message.payload.probes_in_flight

        return on_message

    # --- probes ----------------------------------------------------------

    async def run_probe(
        self,
        agent_id: str,
        probe: str,
        params: dict[str, Any],
        timeout_s: float,
        *,
        admin: bool = False,
        fan_out_of: str | None = None,
    ) -> ProbeResponse:
        """Run one probe on one agent; raises AgentUnavailable, ProbeTimeout or ProbeFailed.

        Of an agent's probe slots, the last `admin_reserved_slots` are an admin key's only: a
        member key (an assistant in a loop) that fills the rest leaves room to look into it.
        A fan-out's probe (``fan_out_of``: the caller's key id) first waits for a place on the
        agent and one in the hub (`fan_out_places`), keys in turns, and runs on the connection
        whose place it holds: the agent reconnected meanwhile, it waits for a place on the new one
        (on the new link with the old one's place, each reconnect let 8 more in).
        """
        session = self.sessions.get(agent_id)
        while fan_out_of is not None and session is not None:
            if not session.fan_out_places.free:  # why a fan-out step is slow to start, for an operator
                log.debug("a fan-out probe of key %s waits its turn on agent %s", fan_out_of, agent_id)
            async with session.fan_out_places.place(fan_out_of):
                if self.sessions.get(agent_id) is session:  # not a place of an old connection
                    async with self.fan_out_places.place(fan_out_of):
                        if self.sessions.get(agent_id) is session:
                            return await self._run_on(session, probe, params, timeout_s, admin)
            session = self.sessions.get(agent_id)
        if session is None:
            raise AgentUnavailable(self.unavailable_reason(agent_id))
        return await self._run_on(session, probe, params, timeout_s, admin)

    async def _run_on(
        self, session: AgentSession, probe: str, params: dict[str, Any], timeout_s: float, admin: bool
    ) -> ProbeResponse:
        record = self.records.get(session.agent_id)
        # held since the caller looked: a fan-out's probe waited for its place meanwhile
        if record is not None and record.status == "degraded":
            raise AgentUnavailable(degraded_reason(record.name))
        name = record.name if record is not None else session.agent_id
        in_flight = session.link.statistics().in_flight
        if in_flight >= self.max_in_flight_per_agent:
            raise AgentUnavailable(
                f"agent {name} has {self.max_in_flight_per_agent} probes in flight already; try again shortly"
            )
        if not admin and in_flight >= self.max_in_flight_per_agent - self.admin_reserved_slots:
            raise AgentUnavailable(
                f"agent {name} has {in_flight} probes in flight already, and its last "
                f"{self.admin_reserved_slots} slots are kept for admin keys; try again shortly"
            )
        payload = ProbeRequestPayload(
            request_id=uuid.uuid4().hex, probe=probe, params=params, timeout_s=timeout_s
        )
        try:
            with trio.fail_after(timeout_s + 1.0):
                return await session.link.request(ProbeRequest(payload=payload))
        except trio.TooSlowError:
            raise ProbeTimeout(f"probe {probe} on agent {name} got no answer within {timeout_s:g}s") from None

    def unavailable_reason(self, agent_id: str) -> str:
        """Why an agent that is not online cannot run probes: held as degraded, or offline since when."""
        record = self.records.get(agent_id)
        name = record.name if record else agent_id
        if self.closing is not None:
            return f"agent {name} is unavailable: {self.closing}"
        if record is not None and record.status == "degraded":
            return degraded_reason(name)
        seen = self.last_seen(agent_id)
        refusal = self._refusals.get(agent_id)
        if refusal is not None and (seen is None or refusal.at >= seen):
            offline = "is offline" if seen is None else f"is offline since {iso_utc(seen)} (last seen)"
            return (
                f"agent {name} {offline}: its last connection attempt, at {iso_utc(refusal.at)}, "
                f"was refused: {refusal.reason}"
            )
        if seen is None:
            return f"agent {name} is offline and has never connected"
        return f"agent {name} is offline since {iso_utc(seen)} (last seen)"

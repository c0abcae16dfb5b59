"""`/ws/agent`: authenticate an agent on its first frame, then run its link.

The first frame must be a signed ``agent.register`` naming an enrolled
agent id; its signature is checked against the public key stored at
enrollment, with the replay guard. Anything else gets ``hub.reject`` with a
reason and the socket closes with a policy-violation code. The signed
``hub.ack`` carries the hub's half of the link-key exchange; every later frame
of the connection is authenticated with the link keys (`sonde.protocol.linkkeys`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from sqlite_utils import Database

from sonde import __version__
from sonde.hub.agent_records import AgentRecord, get_agent, revocation_reason
from sonde.hub.agent_refusal import Refused, refuse, unreadable_register
from sonde.hub.agent_session import AgentSession, booted_at
from sonde.hub.attestation import ATTESTATION_FIELDS, check_attestation
from sonde.hub.connection_lines import LINES
from sonde.hub.fleet import REMOVED_BY_ADMIN
from sonde.hub.shared_packs import described_packs
from sonde.hub.store import REREADS_WHEN_OVERTAKEN, StoreCommitFailed
from sonde.hub.tcp_guard import WAITING
from sonde.protocol.codec import FrameCodec, parse_frame
from sonde.protocol.errors import ProtocolError, SignatureError
from sonde.protocol.linkkeys import LinkKeyExchange, LinkKeys
from sonde.protocol.messages import (
    AckPayload,
    AgentRegister,
    HubAck,
    utc_now,
)
from sonde.protocol.signing import public_key_from_text, verify_frame
from sonde.runtime import open_link
from sonde.transport import CLOSE_GOING_AWAY, CLOSE_POLICY, CLOSE_TRY_AGAIN_LATER, LinkClosed, Transport

if TYPE_CHECKING:
    from sonde.hub.core import Hub

AsgiSend = Callable[[dict[str, Any]], Awaitable[None]]
log = logging.getLogger(__name__)
# Hypercorn passes on neither the code nor the reason of a close the client began: the app
# gets 1006 whether the agent stopped cleanly or its network dropped.
ABNORMAL_CLOSURE = 1006
CLOSE_INTERNAL_ERROR = 1011
REGISTER_TIMEOUT_S = 15.0
LIVENESS_GRACE_S = 5.0


class AsgiWebSocketTransport:
    """`Transport` over the ASGI websocket events hypercorn gives the root app.

    The hub serves ``/ws/agent`` straight from ASGI: Quart's websocket wrapper
    cost two extra coroutine hops and a signal per frame (~8% of a fan-out's
    hub CPU), and the agent socket needs none of Quart.
    """

    def __init__(self, receive: Callable[[], Awaitable[dict[str, Any]]], send: AsgiSend) -> None:
        self._receive = receive
        self._send = send
        self._closed = False

    async def send_text(self, text: str) -> None:
        await self._send({"type": "websocket.send", "text": text})

    async def receive_text(self) -> str:
        event = await self._receive()
        if event["type"] == "websocket.receive":
            text = event.get("text")
            if text is None:
                raise LinkClosed("binary frames are not part of the protocol")
            return str(text)
        self._closed = True
        code = event.get("code", 1005)
        if code == ABNORMAL_CLOSURE:  # hypercorn reports every close the agent began as 1006
            raise LinkClosed("the agent closed the connection, or it dropped")
        raise LinkClosed(f"connection closed ({code})")

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self._closed:
            self._closed = True
            await self._send({"type": "websocket.close", "code": code, "reason": reason})


async def serve_agent_websocket(
    hub: Hub, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]], send: AsgiSend
) -> None:
    """The ASGI app of ``/ws/agent``: refuse browsers, accept, then `serve_agent`."""
    event = await receive()
    if event["type"] != "websocket.connect":
        return
    headers = {k.decode("latin-1").lower() for k, _ in scope.get("headers", [])}
    if "origin" in headers:  # browsers always send Origin; agents never do
        await send({"type": "websocket.close", "code": 1008, "reason": "browsers may not connect here"})
        return
    client = scope.get("client") or ("?",)
    try:
        await send({"type": "websocket.accept"})
    except Exception as exc:  # the server gave up on the request already (a malformed upgrade)
        log.debug("could not accept the agent socket from %s: %s: %.200s", client[0], type(exc).__name__, exc)
        return
    await serve_agent(hub, AsgiWebSocketTransport(receive, send), str(client[0]))


async def serve_agent(hub: Hub, transport: Transport, peer: str) -> None:
    """Run one agent connection from register to close."""
    if hub.fleet.closing is not None:  # the hub is stopping: the agent retries later
        await transport.close(CLOSE_GOING_AWAY, hub.fleet.closing)
        return
    # Until its register is verified a socket is a stranger's, held for up to REGISTER_TIMEOUT_S
    # with up to a frame's worth of memory: counted with the address's idle connections, or one
    # address could hold every file descriptor the hub has, with no key.
    if not WAITING.admit(peer):
        await transport.close(CLOSE_TRY_AGAIN_LATER, "too many connections from this address are waiting")
        return
    codec = FrameCodec(signing_key=hub.signing_key, max_frame_bytes=hub.config.max_frame_bytes, peer="agent")
    try:
        with trio.fail_after(REGISTER_TIMEOUT_S):
            admitted = await authenticate(hub, transport, codec)
    except Refused as refused:
        await refuse(hub, transport, codec, refused, peer)
        return
    except trio.TooSlowError:
        await transport.close(CLOSE_POLICY, "no register frame in time")
        return
    except LinkClosed as ended:  # gone before a register, or a binary frame instead of one
        log.info("agent socket from %s ended before a register: %s", peer, ended)
        await transport.close(CLOSE_POLICY, "the first frame must be agent.register")
        return
    except StoreCommitFailed as exc:
        await cannot_write(transport, f"from {peer}", exc)
        return
    finally:
        WAITING.started(peer)
    try:
        await run_session(hub, transport, codec, admitted, peer)
    except StoreCommitFailed as exc:
        await cannot_write(transport, admitted.register.payload.name, exc)


async def cannot_write(transport: Transport, agent: str, exc: StoreCommitFailed) -> None:
    """A full disk, a database locked by another process: say so once per attempt, no traceback."""
    log.warning(
        "agent %s could not be brought online: the hub cannot write its database (%s)", agent, exc.cause
    )
    await transport.close(CLOSE_INTERNAL_ERROR, "the hub cannot write its database; try again later")


@dataclass(frozen=True)
class Admitted:
    """A verified register, the hub's half of the link-key exchange, the keys agreed, and the
    agent's record as stored when it connected."""

    register: AgentRegister  # without its packs (a few hundred KiB a connection): they are in ``packs``
    hub_link_key: str
    link_keys: LinkKeys
    record: AgentRecord  # as stored when it connected
    packs: list[Any]  # the packs it described, as the copies other agents' records share


@dataclass(frozen=True)
class Verified:
    """A register whose signature checked out, as the hub keeps it while it asks the store
    about the agent: without the frame's text and its parsed forms."""

    register: AgentRegister  # without its packs: they are in ``packs``
    record: AgentRecord  # as in memory
    hub_link_key: str
    link_keys: LinkKeys
    packs: list[Any]


@dataclass(frozen=True)
class NotEnrolled:
    """A register naming an agent id this hub has no record of (its signature is not checked)."""

    register: AgentRegister  # without its packs


async def authenticate(hub: Hub, transport: Transport, codec: FrameCodec) -> Admitted:
    """Read and check the first frame; raises `Refused` (bound to the register once one parsed).

    The frame is checked in one step that awaits nothing (`verify_register`), and only what
    is kept of it is alive while the store is asked: its text and parsed forms are some
    500 KiB of objects with real pack descriptions, and in a reconnect storm many registers
    wait on the store at once. Held there, they left the hub's heap fragmented for good:
    129-134 KiB of RSS per agent at 1,000 agents connecting 96 at a time, against 112-117
    since (benchmarks, scale scenario, alternating runs).
    """
    checked = verify_register(hub, codec, await transport.receive_text())
    try:
        if isinstance(checked, NotEnrolled):
            assert checked.register.agent_id is not None
            revoked = await hub.store.read(revocation, checked.register.agent_id)
            if revoked is not None:
                # the fix is the agent's to name: `sonde enroll` for a service, a restart for `sonde up`'s own
                raise Refused("revoked", *revoked, claimed=checked.register.agent_id, revoked_id=True)
            raise Refused("unknown_agent", "this agent id is not enrolled with this hub; run `sonde enroll`")
        record = await current_record(hub, checked.record)
    except Refused as refused:
        refused.register = checked.register
        raise
    return Admitted(checked.register, checked.hub_link_key, checked.link_keys, record, checked.packs)


def revocation(db: Database, agent_id: str) -> tuple[str, str] | None:
    """Why ``agent_id`` is refused (`revocation_reason`) and the name it had; None if never revoked."""
    row = db.execute("SELECT name FROM revoked_agents WHERE id = ?", [agent_id]).fetchone()
    reason = revocation_reason(db, agent_id)
    return None if reason is None or row is None else (reason, row[0])


def verify_register(hub: Hub, codec: FrameCodec, text: str) -> Verified | NotEnrolled:
    """Parse the first frame and check it against the agent's record in memory; raises `Refused`."""
    try:
        message, raw = parse_frame(text, hub.config.max_frame_bytes)
    except ProtocolError as exc:
        raise unreadable_register(hub, exc, text) from None
    if not isinstance(message, AgentRegister) or not message.agent_id:
        raise Refused("protocol_error", "the first frame must be agent.register carrying agentId")
    register = message.model_copy(update={"payload": message.payload.model_copy(update={"packs": ()})})
    record = hub.fleet.records.get(message.agent_id)
    if record is None:
        return NotEnrolled(register)
    try:
        return admit(hub, codec, message, raw, register, record)
    except Refused as refused:
        refused.register = register
        raise


def admit(
    hub: Hub,
    codec: FrameCodec,
    message: AgentRegister,
    raw: dict[str, Any],
    register: AgentRegister,
    record: AgentRecord,
) -> Verified:
    """Check a parsed register (``register`` is it without its packs) against ``record``;
    raises `Refused`."""
    try:
        verify_frame(raw, public_key_from_text(record.public_key))
        hub.fleet.register_replays.check(record.id, message.nonce, message.ts, utc_now())
    except SignatureError as exc:
        raise Refused("bad_signature", f"register frame rejected: {exc.message}", record.name) from None
    if message.payload.name != record.name:
        raise Refused(
            "protocol_error",
            f"agent is enrolled as {record.name!r}, not {message.payload.name!r}",
            record.name,
        )
    if message.payload.link_key is None:
        raise Refused(
            "protocol_error",
            "the register carries no linkKey: upgrade this agent to the hub's version",
            record.name,
        )
    exchange = LinkKeyExchange()
    try:
        link_keys = exchange.derive(message.payload.link_key, role="hub")
    except ValueError as exc:
        raise Refused("protocol_error", f"the register's {exc}", record.name) from None
    codec.peer_key = public_key_from_text(record.public_key)
    return Verified(register, record, exchange.public_text, link_keys, described_packs(message.payload.packs))


async def current_record(hub: Hub, record: AgentRecord) -> AgentRecord:
    """``record`` as the database has it now, kept in the fleet.

    The CLI changes the file, not this process (`sonde hub agent accept`, `remove`): the
    attestation must be compared against what an admin accepted, not what was in memory.
    Raises `Refused` if the agent was removed meanwhile.
    """
    # through the writer, not a reader: it sees every change this hub queued before (a
    # previous connection's last_seen: without it, a quick reconnect would pass as the first)
    for _ in range(REREADS_WHEN_OVERTAKEN):
        before = hub.fleet.records.get(record.id)
        fresh = await hub.store.write(get_agent, record.id)
        now = hub.fleet.records.get(record.id)
        if now is before:
            break
        # the hub changed the record while this read ran (tags, an accept): a write queued after
        # it, which the next read sees; keeping this one would undo it in memory
    if fresh is None or now is None:  # removed, from the CLI or (meanwhile) through the hub
        reason = await hub.store.read(revocation_reason, record.id) or REMOVED_BY_ADMIN
        hub.fleet.forget(record.id, reason)
        raise Refused("revoked", reason, record.name)
    if fresh == record:  # the common case: keep the record in memory, not a second copy of it
        return record
    hub.fleet.remember(fresh)
    return fresh


async def audit_connect(hub: Hub, session: AgentSession, replaced: AgentSession | None) -> None:
    """Every accepted connection is on the record with where it came from: a stolen identity used
    from elsewhere shows as another peer (and, while the real agent runs, as connections replacing
    each other)."""
    if hub.fleet.closing is not None:  # attached to be ended at once: the hub is stopping
        return
    detail: dict[str, Any] = {"peer": session.peer, "agentId": session.agent_id}
    if replaced is not None:
        detail["replaced"] = replaced.peer
    await hub.audit("agent", "agent.connect", session.register.name, "ok", detail=detail)


async def run_session(
    hub: Hub, transport: Transport, codec: FrameCodec, admitted: Admitted, peer: str
) -> None:
    register = admitted.register
    agent_id = register.agent_id
    assert agent_id is not None
    claimed = register.payload.attestation.model_dump(mode="json", by_alias=True)
    checked = await check_attestation(hub, admitted.record, claimed)
    if checked is not admitted.record:  # written: the rest may have changed meanwhile (tags, a removal)
        hub.fleet.keep_fields(checked, *ATTESTATION_FIELDS)
    interval = hub.config.heartbeat_interval_s
    ack = HubAck(
        payload=AckPayload(
            agent_id=agent_id,
            heartbeat_interval_s=interval,
            hub_version=__version__,
            max_frame_bytes=hub.config.max_frame_bytes,
            max_probes_in_flight=hub.config.max_probes_in_flight_per_agent,
            link_key=admitted.hub_link_key,
        )
    )
    await transport.send_text(codec.encode(ack))  # signed with the hub key: the agent pinned it
    codec.link_keys = admitted.link_keys
    session_ref: list[AgentSession] = []
    async with open_link(
        transport,
        codec,
        hub.fleet.message_handler(session_ref),
        liveness_timeout_s=2 * interval + LIVENESS_GRACE_S,
        peer=f"agent {register.payload.name} ({agent_id})",
    ) as link:
        session = AgentSession(
            agent_id, link, register.payload, admitted.packs, booted_mono=booted_at(register), peer=peer
        )
        session_ref.append(session)
        with session.cancel_scope:
            replaced = await hub.fleet.attach(session)
            LINES.say(
                "online",
                log,
                logging.INFO,
                "agent %s (%s) online, from %s",
                register.payload.name,
                agent_id,
                peer,
            )
            await audit_connect(hub, session, replaced)
            try:
                await link.wait_closed()
            finally:
                with trio.CancelScope(shield=True):
                    await hub.fleet.detach(session)
                level = logging.WARNING if link.refused_frame else logging.INFO
                if hub.fleet.closing is not None and not link.refused_frame:
                    level = logging.DEBUG  # the hub is stopping: one line says how many
                LINES.say(
                    "offline",
                    log,
                    level,
                    "agent %s offline: %s",
                    register.payload.name,
                    link.close_reason or "connection closed",
                )

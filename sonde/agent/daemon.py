"""`sonde start`: keep one signed link to the hub and answer its probes.

The connect loop, per connection: open ``ws(s)://HUB/ws/agent``, send a
signed ``agent.register`` as the first frame, wait up to `ACK_TIMEOUT_S` for
the hub's first frame (verified with the pinned hub key). ``hub.ack`` completes
the link-key exchange the register began (fresh keys for every connection;
every later frame both ways carries their HMAC) and starts the link (probe
runner + heartbeats at the interval the hub chose) until it dies. ``hub.reject``
with ``unknown_agent`` or ``revoked`` stops the agent (exit 3). A reject that
echoes this register's ``nonce`` and ``agentId`` is bound to this attempt, so it
is read even when its timestamp is outside the window (a skewed agent still
learns it was removed); an unbound one (an older hub) with a bad timestamp is
only logged. An unbound reject is never obeyed; one saying the hub cannot read the
register (`unread_register_advice`: another Sonde version) says which side to upgrade.
Any other reject (an unbound one included), a transport error, a bad or missing
ack, or a dropped link is retried after a full-jitter exponential backoff
(`backoff_delay`), reset after a connection that stayed up `STABLE_CONNECTION_S` or
that the hub closed saying it is stopping (close code 1001: a restart, so a second one soon
after does not find the agent's backoff grown from the first).
SIGTERM/SIGINT close the socket with code 1000, cancel the probes in flight and
exit 0 (`AgentDaemon.stop`).
"""

from __future__ import annotations

import logging
import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass

import trio
import trio_websocket

from sonde.agent.config import AgentConfig
from sonde.agent.connection import (
    DISCONNECT_TIMEOUT_S,
    TRANSPORT_ERRORS,
    Connector,
    describe_transport_error,
    keep_alive,
    websocket_url,
)
from sonde.agent.exit_codes import EXIT_ENROLLED_AGAIN, EXIT_OK, EXIT_REJECTED
from sonde.agent.hub_version import unread_register_advice
from sonde.agent.identity import default_agent_name, register_payload
from sonde.agent.runner import MAX_PROBES_IN_FLIGHT, ProbeRunner
from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext
from sonde.packs.registry import PackRegistry
from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import REPLACED_BY_NEWER_CONNECTION, RemoteProtocolError, SignatureError
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import (
    AckPayload,
    AgentHeartbeat,
    AgentRegister,
    HeartbeatPayload,
    HubAck,
    HubReject,
    Message,
    RejectPayload,
)
from sonde.protocol.signing import StaleFrame, private_key_from_text, public_key_from_text
from sonde.runtime import Link, open_link
from sonde.transport import CLOSE_GOING_AWAY, CLOSE_NORMAL, Transport, WebSocketTransport

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 15.0
NOT_OUR_HUB = (
    "its answer is not signed with the hub key this agent pinned at enrollment ({}): it is not the hub "
    "this agent enrolled with. If that hub was reinstalled, enroll again (`sonde enroll --hub URL`, "
    "which asks for the token); if not, something else answers at that address"
)
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0
STABLE_CONNECTION_S = 30.0
# the least heartbeat interval heeded: a hub asking less (a hostile one: the model takes any
# positive number) would have the agent send a heartbeat and a ping in a busy loop
MIN_HEARTBEAT_INTERVAL_S = 1.0
FATAL_REJECT_CODES = frozenset({"unknown_agent", "revoked"})
ENROLLED_AGAIN_WAIT_S = 2.0

NOT_ENROLLED_MESSAGE = "not enrolled: run `sonde enroll --hub URL` first (it asks for the token)"


def reenroll_command(config: AgentConfig) -> str:
    """The command that enrolls this machine again under its old name (it is enrolled already,
    so `sonde enroll` needs --replace; without --name it would take the hostname)."""
    hub = shlex.quote(config.hub_url or "URL")
    name = shlex.quote(config.name or default_agent_name())
    return (
        f"re-enroll with `sonde enroll --hub {hub} --name {name} --replace`, giving it a token "
        f"from `sonde hub token create --name {name}` on the hub"
    )


def bound_to(answer: Message | None, register: AgentRegister) -> bool:
    """True when ``answer`` is a reject that echoes ``register``'s nonce and agent id: the hub
    made it for this very attempt, so it cannot be a replay, whatever its timestamp."""
    return (
        isinstance(answer, HubReject)
        and answer.nonce == register.nonce
        and answer.agent_id is not None
        and answer.agent_id == register.agent_id
    )


def backoff_delay(attempt: int, rng: random.Random, *, max_s: float = BACKOFF_MAX_S) -> float:
    """Full-jitter backoff: uniform in ``[0, min(max_s, BACKOFF_BASE_S * 2**attempt)]`` seconds."""
    return rng.uniform(0, min(max_s, BACKOFF_BASE_S * 2 ** min(attempt, 32)))


@dataclass
class ConnectionEnd:
    """How one connection attempt ended."""

    acked_at: float | None = None
    closed_at: float | None = None
    rejection: RejectPayload | None = None
    dropped: bool = False  # the agent closed the link: the hub did not answer its ping
    hub_stopped: bool = False  # the hub closed the acked link going away (1001): it stops or restarts

    @property
    def up_s(self) -> float:
        """Seconds the link was up after the ack (0 when there was no ack)."""
        if self.acked_at is None or self.closed_at is None:
            return 0.0
        return self.closed_at - self.acked_at


class AgentDaemon:
    """The connect loop of one agent. Use `agent_main`; this class holds its state."""

    def __init__(
        self,
        config: AgentConfig,
        registry: PackRegistry,
        *,
        connect: Connector,
        rng: random.Random,
        max_delay_s: float,
        reenroll_hint: str | None = None,
        enrolled_again: Callable[[], AgentConfig | None] = lambda: None,
    ) -> None:
        """``enrolled_again``: the config this machine holds now when it is another identity's
        (`sonde enroll --replace` while the agent ran), else None."""
        hub_url, private_key, hub_key = config.hub_url, config.private_key, config.hub_public_key
        if hub_url is None or private_key is None or hub_key is None or config.agent_id is None:
            raise ValueError(f"{NOT_ENROLLED_MESSAGE} (missing {', '.join(config.missing_identity())})")
        self.config = config
        self.registry = registry
        self.url = websocket_url(hub_url)
        self._private_key = private_key_from_text(private_key)
        self._hub_key = public_key_from_text(hub_key)
        self.scrubber = Scrubber.from_config(config)  # every result and error is scrubbed before it is sent
        self.ctx = ProbeContext(settings=config.probe_settings(), redact=self.scrubber.redacted)
        # computed once: a few file reads, at start-up before any connection
        self.register = register_payload(config.name or default_agent_name(), registry)
        self._connect = connect
        self._rng = rng
        self._max_delay_s = max_delay_s
        self._reenroll_hint = reenroll_hint or reenroll_command(config)
        self._enrolled_again = enrolled_again
        self._started = False
        self._stopping = False
        self._run_scope = trio.CancelScope()
        self._link: Link | None = None

    async def run(self, task_status: trio.TaskStatus[AgentDaemon] = trio.TASK_STATUS_IGNORED) -> int:
        """Connect, serve, reconnect, until a fatal reject (returns `EXIT_REJECTED`) or `stop` (0)."""
        with self._run_scope:
            return await self._connect_loop(task_status)
        return EXIT_OK

    async def _connect_loop(self, task_status: trio.TaskStatus[AgentDaemon]) -> int:
        attempt = 0
        while True:
            end = await self.connect_once(task_status)
            if self._stopping:
                return EXIT_OK
            if end.rejection is not None and end.rejection.code in FATAL_REJECT_CODES:
                if await self._was_enrolled_again(end.rejection.code):
                    return EXIT_ENROLLED_AGAIN
                log.error(
                    "this agent's identity is unknown to / was revoked by the hub (%s: %s); %s",
                    end.rejection.code,
                    end.rejection.reason,
                    self._reenroll_hint,
                )
                return EXIT_REJECTED
            if end.up_s >= STABLE_CONNECTION_S or end.hub_stopped:
                attempt = 0
            delay = backoff_delay(attempt, self._rng, max_s=self._max_delay_s)
            attempt += 1
            log.info("reconnecting to %s in %.2fs (attempt %d)", self.url, delay, attempt)
            await trio.sleep(delay)

    async def _was_enrolled_again(self, code: str) -> bool:
        """Whether the identity the hub ended was replaced on this machine (said, if so): the
        agent then goes on with the new one, rather than advise the enrolment that was just done.
        `sonde enroll` saves the new identity just after the hub took it: a revoked one waits
        `ENROLLED_AGAIN_WAIT_S` for it."""
        fresh = self._enrolled_again()
        if fresh is None and code == "revoked":
            await trio.sleep(ENROLLED_AGAIN_WAIT_S)
            fresh = self._enrolled_again()
        if fresh is None:
            return False
        log.warning(
            "the hub ended this agent's identity %s: this machine was enrolled again, as %s (agent id %s), "
            "while it ran; the agent goes on with the new identity",
            self.config.agent_id,
            fresh.name,
            fresh.agent_id,
        )
        return True

    async def connect_once(self, task_status: trio.TaskStatus[AgentDaemon]) -> ConnectionEnd:
        """One connection, from connect to close; transport and peer errors end it, logged."""
        end = ConnectionEnd()
        log.info("connecting to %s", self.url)
        try:
            async with self._connect(self.url) as transport:
                await self._session(transport, end, task_status)
        except TRANSPORT_ERRORS as exc:
            log.warning("connection to %s failed: %s", self.url, describe_transport_error(exc))
        except RemoteProtocolError as exc:
            if exc.code in ("stale", "unread_register"):
                log.warning("cannot use the hub at %s: %s", self.url, exc.message)
            else:
                log.warning("the hub at %s answered badly: %s", self.url, exc.message)
        except trio.TooSlowError:
            log.warning("the hub at %s did not answer the register within %gs", self.url, ACK_TIMEOUT_S)
        return end

    async def _session(
        self, transport: Transport, end: ConnectionEnd, task_status: trio.TaskStatus[AgentDaemon]
    ) -> None:
        codec = FrameCodec(
            signing_key=self._private_key, peer_key=self._hub_key, agent_id=self.config.agent_id, peer="hub"
        )
        exchange = LinkKeyExchange()  # fresh for every connection
        payload = self.register.model_copy(update={"link_key": exchange.public_text})
        register = AgentRegister(payload=payload, agent_id=self.config.agent_id)
        await transport.send_text(codec.encode(register))
        with trio.fail_after(ACK_TIMEOUT_S):
            text = await transport.receive_text()
        first, skew = read_answer(codec, text, register)
        if isinstance(first, HubReject):
            also = f"; and by the answer's timestamp, {skew}" if skew else ""
            log.warning(
                "the hub rejected the register: %s (%s)%s", first.payload.reason, first.payload.code, also
            )
            end.rejection = first.payload
            return
        if not isinstance(first, HubAck):
            raise RemoteProtocolError("unexpected_frame", f"expected hub.ack or hub.reject, got {first.type}")
        try:
            codec.link_keys = exchange.derive(first.payload.link_key, role="agent")
        except ValueError as exc:
            raise RemoteProtocolError("bad_link_key", f"the ack's {exc}") from None
        end.acked_at = trio.current_time()
        self._log_connected(first.payload)
        if not self._started:
            self._started = True
            task_status.started(self)
        try:
            end.rejection = await self._serve_link(transport, codec, first.payload, end)
        finally:
            end.closed_at = trio.current_time()

    async def _serve_link(
        self, transport: Transport, codec: FrameCodec, ack: AckPayload, end: ConnectionEnd
    ) -> RejectPayload | None:
        async with trio.open_nursery() as probes:
            limit = min(MAX_PROBES_IN_FLIGHT, ack.max_probes_in_flight)
            runner = ProbeRunner(
                self.registry, self.ctx, probes, max_in_flight=limit, scrub=self.scrubber.scrub_result
            )
            async with open_link(
                transport,
                codec,
                runner.on_message,
                peer="the hub",
                heartbeat_interval_s=max(MIN_HEARTBEAT_INTERVAL_S, ack.heartbeat_interval_s),
                make_heartbeat=lambda: AgentHeartbeat(
                    payload=HeartbeatPayload(probes_in_flight=runner.probes_in_flight)
                ),
            ) as link:
                runner.bind(link)
                if isinstance(transport, WebSocketTransport):
                    probes.start_soon(self._keep_alive, transport.ws, link, end)
                self._link = link
                try:
                    await runner.wait_rejected()
                finally:
                    self._link = None
            probes.cancel_scope.cancel()  # the hub stopped waiting for these
        end.hub_stopped = link.peer_close_code == CLOSE_GOING_AWAY and not end.dropped
        reason = link.close_reason or "closed"
        if link.refused_frame:  # a frame failed its checks on one side: the clocks, most often
            log.warning("disconnected from %s: %s", self.url, reason)
        elif REPLACED_BY_NEWER_CONNECTION in reason:
            log.warning(
                "disconnected from %s: %s: is another `sonde start` running with this identity "
                "(agent %s, a copied config)?",
                self.url,
                reason,
                self.config.agent_id,
            )
        else:
            log.info("disconnected from %s: %s", self.url, reason)
        return runner.rejection

    @staticmethod
    async def _keep_alive(ws: trio_websocket.WebSocketConnection, link: Link, end: ConnectionEnd) -> None:
        # a close of the agent's own (1001 too, echoed back by a slow hub) is not the hub going away
        end.dropped = await keep_alive(ws, link.heartbeat_sent, heard_at=link.heard_at)

    def _log_connected(self, ack: AckPayload) -> None:
        if ack.agent_id != self.config.agent_id:
            log.warning(
                "the hub acknowledged agent %s, but this agent is %s", ack.agent_id, self.config.agent_id
            )
        log.info(
            "connected to %s as %s (agent %s), heartbeat every %gs",
            self.url,
            self.register.name,
            ack.agent_id,
            ack.heartbeat_interval_s,
        )

    async def stop(self, reason: str) -> None:
        """Close the live link (if any) with code 1000, cancel in-flight probes and end `run` (returns 0)."""
        self._stopping = True
        link = self._link
        if link is not None and not link.closed:
            with trio.move_on_after(DISCONNECT_TIMEOUT_S):
                await link.transport.close(CLOSE_NORMAL, reason)
        self._run_scope.cancel()


def read_answer(codec: FrameCodec, text: str, register: AgentRegister) -> tuple[Message, str | None]:
    """The hub's answer to ``register``, verified with the pinned hub key, and what its
    timestamp says of the clocks when that is outside the window.

    A reject is obeyed only when it is bound to this register (`bound_to`), and then even when
    its timestamp is outside the window: the hub signs a reject for any register it is sent,
    so one made for another connection's (a stranger's, with a key of its own) and handed on
    by a man in the middle of a ws:// link would otherwise stop this agent for good. Raises
    `RemoteProtocolError`: ``unbound`` for such a reject (naming its reason, unheeded), or
    ``unread_register`` when it says the hub could not read the register (which side to upgrade),
    ``stale`` for any other answer with a bad timestamp, ``not_our_hub`` for one signed by
    another key.
    """
    try:
        answer = codec.decode(text)
    except StaleFrame as stale:
        if bound_to(stale.frame, register):
            bound: Message = stale.frame
            return bound, stale.message
        if isinstance(stale.frame, HubReject):  # an older hub's: it could be a replay, so not obeyed
            rejected = stale.frame.payload
            raise RemoteProtocolError(
                "stale",
                f"{stale.message}; the hub's answer was a reject ({rejected.code}: {rejected.reason}), "
                "not heeded: it is not bound to this register, so with the clocks apart it could be a replay",
            ) from None
        raise RemoteProtocolError("stale", stale.message) from None
    except SignatureError as exc:
        if exc.code not in ("bad_signature", "unsigned"):
            raise  # replayed: its own message says why
        raise RemoteProtocolError("not_our_hub", NOT_OUR_HUB.format(exc.message)) from None
    if isinstance(answer, HubReject) and not bound_to(answer, register):
        rejected = answer.payload
        advice = unread_register_advice(rejected)  # a hub of another Sonde version, most often
        if advice is not None:
            raise RemoteProtocolError("unread_register", advice)
        raise RemoteProtocolError(
            "unbound",
            f"the hub's answer was a reject ({rejected.code}: {rejected.reason}), not heeded: it does not "
            "echo this register's nonce and agent id, so it was made for another connection",
        )
    return answer, None

"""A scripted fake hub for agent tests: speaks the protocol with the real codec.

Each connection follows the next step of the script: ``"refuse"`` (HTTP 503
on the WebSocket handshake), ``"drop"`` (read the register, then close),
``"reject:CODE"`` (answer `hub.reject`, as an older hub: not bound to the register),
``"bound-reject:CODE"`` (a reject echoing the register's nonce and agentId, as the hub
sends now), ``"impostor"`` (an ack signed by
another key), ``"silent"`` (never answer), ``"ack"`` (answer `hub.ack` and run
a hub-side link until the agent goes), ``"ack:SECONDS"`` (the same, but the
hub closes the link after that many seconds), ``"stop:SECONDS"`` (the same, closing with 1001,
as a hub that stops), ``"deaf"`` (ack, link, then never read
again: the hub can still send, but the agent's writes back up). Past the script: ``"ack"``.
It serves real sockets (`serve`) or any `Transport` (`serve_transport`).
``reject_clock_offset_s`` moves the timestamp of its rejects (a hub whose clock is off);
``max_probes_in_flight`` is the limit its ack sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import trio
import trio_websocket

from sonde.agent.config import AgentConfig
from sonde.protocol.codec import FrameCodec
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import (
    AckPayload,
    AgentHeartbeat,
    AgentRegister,
    HubAck,
    HubReject,
    Message,
    RejectPayload,
    utc_now,
)
from sonde.protocol.signing import Ed25519PrivateKey, new_private_key, private_key_to_text, public_key_to_text
from sonde.runtime import Link, open_link
from sonde.transport import CLOSE_GOING_AWAY, CLOSE_NORMAL, Transport, WebSocketTransport

AGENT_ID = "agent-0001"


def agent_config(hub_url: str, agent_key: Ed25519PrivateKey, hub_key: Ed25519PrivateKey) -> AgentConfig:
    return AgentConfig(
        hub_url=hub_url,
        agent_id=AGENT_ID,
        name="test-agent",
        private_key=private_key_to_text(agent_key),
        hub_public_key=public_key_to_text(hub_key.public_key()),
    )


@dataclass
class FakeHub:
    script: list[str] = field(default_factory=list)
    heartbeat_interval_s: float = 1.0
    reject_clock_offset_s: float = 0.0
    max_probes_in_flight: int = 64
    hub_key: Ed25519PrivateKey = field(default_factory=new_private_key)
    agent_key: Ed25519PrivateKey = field(default_factory=new_private_key)
    connections: list[float] = field(default_factory=list)
    registers: list[AgentRegister] = field(default_factory=list)
    heartbeats: list[tuple[float, int]] = field(default_factory=list)
    close_codes: list[int | None] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    first_heartbeat: trio.Event = field(default_factory=trio.Event)
    disconnected: trio.Event = field(default_factory=trio.Event)
    _linked: trio.Event = field(default_factory=trio.Event)
    _heartbeat: trio.Event = field(default_factory=trio.Event)

    def new_codec(self) -> FrameCodec:
        """A codec for one connection: Ed25519 until the ack, then that connection's link keys."""
        return FrameCodec(signing_key=self.hub_key, peer_key=self.agent_key.public_key())

    def config(self, hub_url: str) -> AgentConfig:
        return agent_config(hub_url, self.agent_key, self.hub_key)

    def next_step(self) -> str:
        self.connections.append(trio.current_time())
        return self.script.pop(0) if self.script else "ack"

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the agent endpoint on 127.0.0.1, port 0; reports the port."""
        async with trio.open_nursery() as nursery:
            server = await nursery.start(trio_websocket.serve_websocket, self._handle, "127.0.0.1", 0, None)
            task_status.started(server.port)

    async def _handle(self, request: trio_websocket.WebSocketRequest) -> None:
        assert request.path == "/ws/agent"
        step = self.next_step()
        if step == "refuse":
            await request.reject(503, body=b"not now")
            return
        ws = await request.accept()
        await self._follow(step, WebSocketTransport(ws))
        await ws.aclose()
        self.close_codes.append(ws.closed.code if ws.closed else None)
        self.disconnected.set()

    async def serve_transport(self, transport: Transport) -> None:
        """Follow the next step of the script over an already open transport."""
        await self._follow(self.next_step(), transport)

    async def _follow(self, step: str, transport: Transport) -> None:
        codec = self.new_codec()
        register = codec.decode(await transport.receive_text())  # verifies the agent's signature
        assert isinstance(register, AgentRegister)
        assert register.agent_id == AGENT_ID
        self.registers.append(register)
        if step == "drop":
            await transport.close(1011, "dropped by the test")
        elif step == "silent":
            await trio.sleep_forever()
        elif step == "impostor":
            impostor = FrameCodec(signing_key=new_private_key())
            ack = AckPayload(
                agent_id=AGENT_ID,
                heartbeat_interval_s=1,
                hub_version="impostor",
                link_key=LinkKeyExchange().public_text,
            )
            await transport.send_text(impostor.encode(HubAck(payload=ack)))
        elif step.startswith(("reject:", "bound-reject:")):
            kind, _, code = step.partition(":")
            reject = RejectPayload(code=code, reason="scripted reject")  # type: ignore[arg-type]
            ts = utc_now() + timedelta(seconds=self.reject_clock_offset_s)
            bound = {"nonce": register.nonce, "agent_id": register.agent_id} if kind == "bound-reject" else {}
            await transport.send_text(codec.encode(HubReject(payload=reject, ts=ts, **bound)))
        elif step == "deaf":
            await self._ack_and_link(DeafTransport(transport), codec, register, None)
        else:
            kind, _, hold = step.partition(":")
            close_code = CLOSE_GOING_AWAY if kind == "stop" else CLOSE_NORMAL
            await self._ack_and_link(transport, codec, register, float(hold) if hold else None, close_code)

    async def _ack_and_link(
        self,
        transport: Transport,
        codec: FrameCodec,
        register: AgentRegister,
        hold_s: float | None,
        close_code: int = CLOSE_NORMAL,
    ) -> None:
        assert register.payload.link_key is not None
        exchange = LinkKeyExchange()
        ack = AckPayload(
            agent_id=AGENT_ID,
            heartbeat_interval_s=self.heartbeat_interval_s,
            max_probes_in_flight=self.max_probes_in_flight,
            hub_version="test",
            link_key=exchange.public_text,
        )
        await transport.send_text(codec.encode(HubAck(payload=ack)))
        codec.link_keys = exchange.derive(register.payload.link_key, role="hub")
        async with open_link(transport, codec, self._on_message) as link:
            self.links.append(link)
            self._linked.set()
            self._linked = trio.Event()
            with trio.move_on_after(hold_s if hold_s is not None else float("inf")):
                await link.wait_closed()
            link.close("scripted close", close_code)

    async def wait_for_links(self, count: int) -> list[Link]:
        """Wait until ``count`` agents have been acknowledged and linked."""
        while len(self.links) < count:
            await self._linked.wait()
        return self.links

    async def wait_for_heartbeats(self, count: int) -> None:
        """Wait until ``count`` heartbeats have come in."""
        while len(self.heartbeats) < count:
            await self._heartbeat.wait()

    async def _on_message(self, message: Message) -> None:
        if isinstance(message, AgentHeartbeat):
            self.heartbeats.append((trio.current_time(), message.payload.probes_in_flight))
            self.first_heartbeat.set()
            self._heartbeat.set()
            self._heartbeat = trio.Event()


class DeafTransport:
    """A hub that stops reading: sends go out, but nothing is ever received. Over a WebSocket,
    trio-websocket's one-message queue fills, it stops reading the socket, the socket buffers
    fill and the agent's sends wait; its pings get no pong."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def send_text(self, text: str) -> None:
        await self.transport.send_text(text)

    async def receive_text(self) -> str:
        await trio.sleep_forever()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self.transport.close(code, reason)

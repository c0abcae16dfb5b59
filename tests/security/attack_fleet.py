"""A real hub and real agents for the attack suite, and raw sockets that speak for enrolled identities.

`attack_fleet` runs one `sonde hub` (heartbeat 1 s) and two `sonde start`
agents, ``alpha`` and ``beta``, offering the test-only ``e2e`` pack.
`enroll_identity` enrolls one more identity through REST with a key pair the
test holds, so a test can speak for it on a raw socket (`raw_agent`).
`assert_fleet_serves` is the "nothing changed" check every attack ends with:
both agents online on their first connection, and each answers a probe
through MCP from its own process.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import trio_websocket

from sonde.agent.enroll import build_request
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM_PACK
from sonde.protocol.codec import FrameCodec, parse_frame
from sonde.protocol.enrollment import EnrollResponse
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import Envelope, HubAck, HubReject, Message
from sonde.protocol.signing import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
    new_private_key,
    public_key_from_text,
    public_key_to_text,
)
from tests.e2e.harness import (
    agent_identity,
    agent_socket,
    enroll_named,
    register_frame,
    rest_token,
    status_of,
    write_test_pack,
)
from tests.e2e.mcpclient import call, mcp_client
from tests.e2e.procs import EnrolledAgent, RunningHub, running_hub, wait_until

FLEET_NAMES = ("alpha", "beta")
REGISTRY = PackRegistry.of([SYSTEM_PACK])  # what raw identities offer, at enrollment and on register
SOCKET_TIMEOUT_S = 10.0


@dataclass
class AttackFleet:
    hub: RunningHub
    agents: dict[str, EnrolledAgent]
    agent_ids: dict[str, str]
    root: Path
    first_connections: dict[str, int] = field(default_factory=dict)

    def connections(self, name: str) -> int:
        """How often agent ``name`` has connected (a displaced agent reconnects)."""
        proc = self.agents[name].proc
        assert proc is not None
        return proc.output.count("connected to")

    def hub_log_count(self, fragment: str) -> int:
        return sum(fragment in line for line in self.hub.proc.lines)


@contextmanager
def attack_fleet(root: Path) -> Iterator[AttackFleet]:
    """A hub with ``alpha`` and ``beta`` online; everything is stopped on the way out."""
    pack_site = write_test_pack(root / "site")
    with running_hub(root, "--heartbeat-interval", "1") as hub:
        agents = {
            name: enroll_named(hub, root / f"home-{name}", name, pack_site=pack_site) for name in FLEET_NAMES
        }
        try:
            for agent in agents.values():
                agent.start()
            wait_until(lambda: all(status_of(hub, name) == "online" for name in FLEET_NAMES), timeout=30)
            ids = {name: agent_identity(agent)[0] for name, agent in agents.items()}
            fleet = AttackFleet(hub, agents, ids, root)
            wait_until(lambda: all(fleet.connections(name) == 1 for name in FLEET_NAMES))
            fleet.first_connections = {name: fleet.connections(name) for name in FLEET_NAMES}
            yield fleet
        finally:
            for agent in agents.values():
                if agent.proc is not None:
                    agent.stop()


# --- identities the test holds the key of ---------------------------------------


@dataclass(frozen=True)
class Identity:
    agent_id: str
    name: str
    key: Ed25519PrivateKey
    hub_key: Ed25519PublicKey

    def register(self, name: str | None = None, exchange: LinkKeyExchange | None = None) -> str:
        """A fresh signed ``agent.register`` frame (claiming ``name`` if given), offering ``exchange``'s link key."""
        return register_frame(self.agent_id, name or self.name, self.key, exchange=exchange)

    def codec(self) -> FrameCodec:
        """Signs as this identity and verifies the hub's frames (Ed25519: no link keys yet)."""
        return FrameCodec(signing_key=self.key, peer_key=self.hub_key, agent_id=self.agent_id)


def enroll_identity(hub: RunningHub, name: str) -> Identity:
    """Enroll ``name`` through POST /api/v1/agents/enroll with a key pair made here."""
    key = new_private_key()
    body = build_request(rest_token(hub), name, public_key_to_text(key.public_key()), REGISTRY)
    with httpx.Client(base_url=hub.url, timeout=10) as http:
        answer = http.post("/api/v1/agents/enroll", content=body.model_dump_json(by_alias=True))
    assert answer.status_code == 201, answer.text
    enrolled = EnrollResponse.model_validate(answer.json())
    return Identity(enrolled.agent_id, enrolled.name, key, public_key_from_text(enrolled.hub_public_key))


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


# --- raw sockets -----------------------------------------------------------------


def text_of(message: str | bytes) -> str:
    assert isinstance(message, str), "the hub sent a binary frame"
    return message


def close_code(closed: trio_websocket.ConnectionClosed) -> int | None:
    return closed.reason.code if closed.reason is not None else None


@dataclass
class Refusal:
    """How the hub answered a socket whose first frame it refused."""

    reject: HubReject | None  # None: closed without a hub.reject
    close_code: int | None


async def first_frame_refusal(hub_url: str, frame: str) -> Refusal:
    """Send ``frame`` first on a new socket; the hub must refuse it and close."""
    with trio.fail_after(SOCKET_TIMEOUT_S):
        async with agent_socket(hub_url) as ws:
            await ws.send_message(frame)
            reject: HubReject | None = None
            try:
                while True:
                    message, _ = parse_frame(text_of(await ws.get_message()))
                    assert isinstance(message, HubReject), f"the hub answered {message.type}"
                    reject = message
            except trio_websocket.ConnectionClosed as closed:
                return Refusal(reject, close_code(closed))


def reject_of(refusal: Refusal) -> tuple[str, str]:
    """The code and reason of a ``hub.reject`` followed by a policy-violation close."""
    assert refusal.reject is not None, refusal
    assert refusal.close_code == 1008, refusal
    return refusal.reject.payload.code, refusal.reject.payload.reason


@dataclass
class RawAgent:
    """A registered raw socket speaking for an `Identity` with the real codec."""

    ws: trio_websocket.WebSocketConnection
    codec: FrameCodec

    async def send(self, message: Envelope) -> str:
        """Sign and send ``message``; returns the frame as sent (to replay it)."""
        text = self.codec.encode(message)
        await self.ws.send_message(text)
        return text

    async def receive(self) -> Message:
        """The hub's next frame, verified with the hub's key."""
        with trio.fail_after(SOCKET_TIMEOUT_S):
            return self.codec.decode(text_of(await self.ws.get_message()))


@asynccontextmanager
async def raw_agent(hub_url: str, identity: Identity) -> AsyncIterator[RawAgent]:
    """Register as ``identity`` on a new socket (the hub must ack) and speak for it."""
    exchange = LinkKeyExchange()
    async with agent_socket(hub_url) as ws:
        await ws.send_message(identity.register(exchange=exchange))
        agent = RawAgent(ws, identity.codec())
        ack = await agent.receive()
        assert isinstance(ack, HubAck), ack
        agent.codec.link_keys = exchange.derive(ack.payload.link_key, role="agent")
        yield agent


# --- the hub's views and the final check ------------------------------------------


async def mcp_probe(hub: RunningHub, agent: str, probe: str, **params: Any) -> dict[str, Any]:
    """Run ``probe`` on ``agent`` through MCP (must succeed); the reading."""
    async with mcp_client(hub.url, hub.admin_key) as client:
        arguments: dict[str, Any] = {"agent": agent, "probe": probe}
        if params:
            arguments["params"] = params
        return await call(client, "probe", **arguments)


async def assert_fleet_serves(fleet: AttackFleet) -> None:
    """Both agents online on their first connection, each answering from its own process."""
    for name, agent in fleet.agents.items():
        assert status_of(fleet.hub, name) == "online", name
        assert fleet.connections(name) == fleet.first_connections[name], f"{name} was displaced"
        value = secrets.randbelow(1_000_000)
        reading = await mcp_probe(fleet.hub, name, "e2e.echo.value", value=value)
        assert reading["agent_id"] == fleet.agent_ids[name]
        assert agent.proc is not None
        assert reading["result"] == {"value": value, "pid": agent.proc.popen.pid}


def audit_actions(hub: RunningHub, action: str) -> list[dict[str, Any]]:
    """The audit rows with ``action`` (detail decoded), through the admin REST route."""
    with hub.client() as http:
        answer = http.get("/api/v1/audit", params={"action": action, "limit": 1000})
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, Any]] = answer.json()["entries"]
    for row in rows:
        if isinstance(row.get("detail"), str):
            row["detail"] = json.loads(row["detail"])
    return rows

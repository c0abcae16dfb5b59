"""Attacks on `/ws/agent` and on body limits, against a real hub with real agents.

Every attack asserts the refusal and that nothing changed: ``alpha`` and
``beta`` stay online on their first connection and answer probes from their
own processes, a pending probe gets its genuine answer or an error, never a
forged one, and the audit log records each refused connection. A frame that
fails its MAC or replay check on an established link ends that link. (Token reuse and expiry, name
takeover by enrollment, a register signed with another key, a replayed or
stale register, a cross-origin socket and DNS rebinding on /mcp are in
tests/e2e/test_hub_security.py.)
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from sonde.hub.asgi import MAX_MCP_BODY_BYTES
from sonde.protocol.codec import SHOWN_VALUE_CHARS, FrameCodec
from sonde.protocol.linkkeys import LinkKeyExchange
from sonde.protocol.messages import (
    AckPayload,
    AgentHeartbeat,
    HeartbeatPayload,
    HubAck,
    ProbeError,
    ProbeErrorPayload,
    ProbeRequest,
    ProbeResponse,
    ProbeResponsePayload,
    utc_now,
)
from sonde.protocol.signing import new_private_key, sign_frame
from tests.e2e.harness import agent_identity, agent_rows, agent_socket, eventually, register_frame, status_of
from tests.e2e.mcpclient import call_error, mcp_client, mcp_refusal
from tests.e2e.procs import RunningHub
from tests.security.attack_fleet import (
    AttackFleet,
    Identity,
    RawAgent,
    assert_fleet_serves,
    attack_fleet,
    audit_actions,
    close_code,
    enroll_identity,
    first_frame_refusal,
    mcp_probe,
    raw_agent,
    reject_of,
    unique_name,
)

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
MCP_BODY_LIMIT = MAX_MCP_BODY_BYTES  # the hub's, below the mcp SDK's 4 MiB
REST_BODY_LIMIT = 256 * 1024
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MEMORY = "system.memory.usage"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AttackFleet]:
    with attack_fleet(tmp_path_factory.mktemp("attack-wire")) as running:
        yield running


# --- helpers ------------------------------------------------------------------------


def denied_connects(fleet: AttackFleet) -> list[dict[str, Any]]:
    """The audit's refused agent connections, newest first."""
    return [row for row in audit_actions(fleet.hub, "agent.connect") if row["outcome"] == "denied"]


async def expect_denied_connects(fleet: AttackFleet, before: int, added: int) -> list[dict[str, Any]]:
    """Wait for the audit (group commit) to hold exactly ``added`` more refused connections."""
    await eventually(lambda: len(denied_connects(fleet)) >= before + added)
    rows = denied_connects(fleet)
    assert len(rows) == before + added
    return rows[:added]


def probe_runs(fleet: AttackFleet, agent: str) -> list[dict[str, Any]]:
    """The audit's probe runs on ``agent`` through MCP, newest first."""
    return [row for row in audit_actions(fleet.hub, "mcp.probe") if row["target"] == agent]


def dropped(fleet: AttackFleet) -> int:
    """Frames the hub dropped on established links (it logs each one)."""
    return fleet.hub_log_count("dropped a frame from agent ")


async def refused_on_link(agent: RawAgent, frame: str) -> tuple[int | None, str]:
    """Send ``frame`` on an established link; the hub must close it: the close code and reason."""
    with trio.fail_after(10):
        await agent.ws.send_message(frame)
        try:
            while True:
                await agent.ws.get_message()
        except trio_websocket.ConnectionClosed as closed:
            return close_code(closed), closed.reason.reason if closed.reason else ""


def altered(text: str, change: Callable[[dict[str, Any]], None]) -> str:
    """``text`` with ``change`` applied to its JSON, keeping the old signature."""
    frame: dict[str, Any] = json.loads(text)
    change(frame)
    return json.dumps(frame)


def unsigned(text: str) -> str:
    return altered(text, lambda frame: frame.pop("sig"))


def answer(request: ProbeRequest, result: dict[str, Any]) -> ProbeResponse:
    payload = ProbeResponsePayload(
        request_id=request.payload.request_id, probe=request.payload.probe, result=result, duration_ms=1
    )
    return ProbeResponse(payload=payload)


@asynccontextmanager
async def pending_probe(
    fleet: AttackFleet, agent: str, probe: str, **params: Any
) -> AsyncIterator[dict[str, Any]]:
    """Run ``probe`` on ``agent`` through MCP for the block; the reading is filled when it answers."""
    reading: dict[str, Any] = {}

    async def run() -> None:
        reading.update(await mcp_probe(fleet.hub, agent, probe, **params))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            yield reading


async def next_request(agent: RawAgent) -> ProbeRequest:
    message = await agent.receive()
    while not isinstance(message, ProbeRequest):  # nothing else is expected, but be exact about it
        message = await agent.receive()
    return message


# --- register frames -----------------------------------------------------------------


async def test_register_with_its_signature_removed_is_refused(fleet: AttackFleet) -> None:
    alpha_id, alpha_key = agent_identity(fleet.agents["alpha"])
    genuine = register_frame(alpha_id, "alpha", alpha_key)  # never sent as it is: that would replace alpha
    before = len(denied_connects(fleet))
    variants = [
        unsigned(genuine),
        altered(genuine, lambda frame: frame.update(sig=None)),
        altered(genuine, lambda frame: frame.update(sig="")),
        altered(genuine, lambda frame: frame.update(sig="A" * 88)),
        altered(genuine, lambda frame: frame.update(sig="not base64!")),
    ]
    for frame in variants:
        code, reason = reject_of(await first_frame_refusal(fleet.hub.url, frame))
        assert code == "bad_signature"
        assert "not signed" in reason or "does not verify" in reason, reason

    rows = await expect_denied_connects(fleet, before, len(variants))
    assert all("register frame rejected" in row["detail"]["reason"] for row in rows)
    assert {row["target"] for row in rows} == {"alpha"}  # whose identity was used, for the operator
    assert "refused agent connection from 127.0.0.1 (agent alpha): register frame rejected" in (
        fleet.hub.proc.output
    )
    await assert_fleet_serves(fleet)


async def test_register_altered_after_signing_is_refused(fleet: AttackFleet) -> None:
    alpha_id, alpha_key = agent_identity(fleet.agents["alpha"])
    beta_id = fleet.agent_ids["beta"]
    alterations: dict[str, Callable[[dict[str, Any]], None]] = {
        "payload.name": lambda frame: frame["payload"].update(name="beta"),
        "agentId": lambda frame: frame.update(agentId=beta_id),
        "agentId and payload.name": lambda frame: frame.update(
            agentId=beta_id, payload={**frame["payload"], "name": "beta"}
        ),
        "payload.packs": lambda frame: frame["payload"].update(packs=[]),
        "payload.attestation.codeHash": lambda frame: frame["payload"]["attestation"].update(
            codeHash="0" * 64
        ),
        "ts": lambda frame: frame.update(ts=(utc_now() + timedelta(seconds=1)).isoformat()),
        "nonce": lambda frame: frame.update(nonce=secrets.token_urlsafe(16)),
    }
    before = len(denied_connects(fleet))
    for where, change in alterations.items():
        frame = altered(register_frame(alpha_id, "alpha", alpha_key), change)
        code, reason = reject_of(await first_frame_refusal(fleet.hub.url, frame))
        assert (code, "does not verify" in reason) == ("bad_signature", True), (where, code, reason)

    await expect_denied_connects(fleet, before, len(alterations))
    rows = agent_rows(fleet.hub)
    assert {rows[name]["id"] for name in ("alpha", "beta")} == {alpha_id, beta_id}
    await assert_fleet_serves(fleet)


async def test_own_identity_cannot_register_under_another_agents_name(fleet: AttackFleet) -> None:
    attacker = enroll_identity(fleet.hub, unique_name("attacker"))  # a fresh key of the attacker's own
    ids_before = {name: row["id"] for name, row in agent_rows(fleet.hub).items()}
    before = len(denied_connects(fleet))
    for victim in ("alpha", "beta", "nobody-yet"):
        code, reason = reject_of(await first_frame_refusal(fleet.hub.url, attacker.register(name=victim)))
        assert code == "protocol_error"
        assert f"enrolled as {attacker.name!r}, not {victim!r}" in reason

    await expect_denied_connects(fleet, before, 3)
    assert {name: row["id"] for name, row in agent_rows(fleet.hub).items()} == ids_before
    assert status_of(fleet.hub, attacker.name) != "online"
    await assert_fleet_serves(fleet)
    # the identity itself is sound: under its own name it gets in
    async with raw_agent(fleet.hub.url, attacker):
        await eventually(lambda: status_of(fleet.hub, attacker.name) == "online")


async def test_replies_injected_by_an_unregistered_socket_are_refused(fleet: AttackFleet) -> None:
    stand_in = enroll_identity(fleet.hub, unique_name("stand-in"))
    alpha_id = fleet.agent_ids["alpha"]
    marker = secrets.token_hex(8)
    before = len(denied_connects(fleet))
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        async with (
            pending_probe(fleet, stand_in.name, MEMORY) as reading,
            pending_probe(fleet, "alpha", "system.cpu.usage", interval_s=2.0) as alpha_reading,
        ):
            request = await next_request(agent)  # the attacker even knows the request id
            forger = FrameCodec(signing_key=new_private_key(), agent_id=stand_in.agent_id)
            forged_reply = forger.encode(answer(request, {"forged": True}))
            error = ProbeErrorPayload(request_id=request.payload.request_id, code="forged", message="forged")
            alpha_forger = FrameCodec(signing_key=new_private_key(), agent_id=alpha_id)
            alpha_reply = ProbeResponsePayload(
                request_id=uuid.uuid4().hex, probe="system.cpu.usage", result={"forged": True}, duration_ms=1
            )
            injected = [
                forged_reply,
                unsigned(forged_reply),
                forger.encode(ProbeError(payload=error)),
                forger.encode(
                    HubAck(
                        payload=AckPayload(
                            agent_id=stand_in.agent_id,
                            heartbeat_interval_s=1,
                            hub_version="0",
                            link_key=LinkKeyExchange().public_text,
                        )
                    )
                ),
                stand_in.codec().encode(answer(request, {"forged": True})),  # even with the right key
                alpha_forger.encode(ProbeResponse(payload=alpha_reply)),
                alpha_forger.encode(
                    ProbeError(payload=ProbeErrorPayload(request_id=uuid.uuid4().hex, code="x", message="x"))
                ),
            ]
            for frame in injected:
                code, reason = reject_of(await first_frame_refusal(fleet.hub.url, frame))
                assert code == "protocol_error"
                assert "first frame must be agent.register" in reason
            assert not reading, "an injected frame answered the pending probe"
            assert not alpha_reading
            await agent.send(answer(request, {"marker": marker}))

    assert reading["result"] == {"marker": marker}
    assert alpha_reading["agent_id"] == alpha_id
    assert alpha_reading["result"]["interval_s"] == 2.0
    assert "forged" not in alpha_reading["result"]
    await expect_denied_connects(fleet, before, len(injected))
    # the audit holds one run of each probe, as asked and as answered by its own agent
    await eventually(lambda: len(probe_runs(fleet, stand_in.name)) == 1)
    assert [(row["outcome"], row["detail"]["probe"]) for row in probe_runs(fleet, stand_in.name)] == [
        ("ok", MEMORY)
    ]
    await eventually(lambda: probe_runs(fleet, "alpha")[0]["detail"]["params"] == {"interval_s": 2.0})
    await assert_fleet_serves(fleet)


# --- frames on an established link ------------------------------------------------------


async def round_trip(fleet: AttackFleet, agent: RawAgent, stand_in: Identity) -> tuple[dict[str, Any], str]:
    """A probe through MCP answered by ``agent``; the reading and the reply frame as sent."""
    marker = secrets.token_hex(8)
    async with pending_probe(fleet, stand_in.name, MEMORY) as reading:
        reply = await agent.send(answer(await next_request(agent), {"marker": marker}))
    assert reading["result"] == {"marker": marker}
    return reading, reply


async def test_a_frame_replayed_on_an_established_link_ends_it(fleet: AttackFleet) -> None:
    """A replay on an ordered, authenticated connection means the link is compromised (or its
    peer broken): the hub ends it rather than go on over a stream it cannot trust."""
    stand_in = enroll_identity(fleet.hub, unique_name("replayer"))
    replay = "refused a frame from the agent: frame nonce was already used (replay)"
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        busy = await agent.send(AgentHeartbeat(payload=HeartbeatPayload(probes_in_flight=7)))
        await agent.send(AgentHeartbeat())
        assert await refused_on_link(agent, busy) == (1008, replay)
    await eventually(lambda: status_of(fleet.hub, stand_in.name) == "offline")
    assert fleet.hub_log_count(f"agent {stand_in.name} offline: {replay}") == 1

    # a replayed answer too: the probe had its one genuine answer, the replay ends the link
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        _, reply = await round_trip(fleet, agent, stand_in)
        assert await refused_on_link(agent, reply) == (1008, replay)
    # the identity itself is sound: on a new link it works
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        await round_trip(fleet, agent, stand_in)
        assert status_of(fleet.hub, stand_in.name) == "online"
    await assert_fleet_serves(fleet)


Forger = Callable[[str, ProbeRequest], str]  # (the genuine answer, the request) -> a forged frame


async def forged_on_a_pending_probe(
    fleet: AttackFleet, stand_in: Identity, forge: Forger
) -> tuple[int | None, str, str]:
    """Hold a probe through MCP, send ``forge``'s frame instead of its answer: how the hub
    closed the link (code, reason) and the error the probe's caller got."""
    errors: list[str] = []
    async with (
        mcp_client(fleet.hub.url, fleet.hub.admin_key) as client,
        raw_agent(fleet.hub.url, stand_in) as agent,
    ):

        async def probe() -> None:
            errors.append(await call_error(client, "probe", agent=stand_in.name, probe=MEMORY))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(probe)
                request = await next_request(agent)
                genuine = agent.codec.encode(answer(request, {"marker": "genuine, never sent"}))
                code, reason = await refused_on_link(agent, forge(genuine, request))
    (error,) = errors
    return code, reason, error


async def test_an_unsigned_foreign_or_altered_frame_ends_the_link_and_answers_nothing(
    fleet: AttackFleet,
) -> None:
    """A frame failing its MAC on an ordered, authenticated connection: injected, or a broken
    peer. Either way nothing later on that stream can be trusted to arrive: the hub ends the link,
    the pending probe's caller is told why at once, and a reconnect starts over with fresh keys."""
    stand_in = enroll_identity(fleet.hub, unique_name("tampered"))
    foreign = FrameCodec(signing_key=new_private_key(), agent_id=stand_in.agent_id)
    other_link = stand_in.codec()
    other_link.link_keys = LinkKeyExchange().derive(LinkKeyExchange().public_text, role="agent")

    def error_for(request: ProbeRequest) -> ProbeError:
        payload = ProbeErrorPayload(request_id=request.payload.request_id, code="x", message="x")
        return ProbeError(payload=payload)

    forgers: list[Forger] = [
        lambda genuine, _: unsigned(genuine),
        lambda genuine, _: altered(genuine, lambda frame: frame["payload"].update(result={"forged": True})),
        lambda _, request: foreign.encode(answer(request, {"forged": True})),
        lambda _, request: foreign.encode(error_for(request)),
        # signed with the agent's own Ed25519 key, not this link's key: the register is over
        lambda _, request: stand_in.codec().encode(answer(request, {"forged": True})),
        # the right agent, but the link key of another connection
        lambda _, request: other_link.encode(answer(request, {"forged": True})),
    ]
    for forge in forgers:
        code, reason, error = await forged_on_a_pending_probe(fleet, stand_in, forge)
        assert code == 1008
        assert reason in (
            "refused a frame from the agent: frame is not signed",
            "refused a frame from the agent: frame signature does not verify",
        )
        assert f"agent disconnected: {reason}" in error  # no forged answer, and no 30 s wait
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        await round_trip(fleet, agent, stand_in)
    await assert_fleet_serves(fleet)


async def test_frames_that_once_broke_the_codec_are_refused_cleanly(fleet: AttackFleet) -> None:
    """Regression: a non-string ``type`` raised TypeError; a signed frame with a timestamp
    without a time zone raised TypeError in the replay check (both outside `ProtocolError`)."""
    stand_in = enroll_identity(fleet.hub, unique_name("oddities"))
    tracebacks = fleet.hub_log_count("Traceback")
    before = len(denied_connects(fleet))

    def naive_ts(text: str) -> str:
        frame = json.loads(text)
        frame.pop("sig")
        frame["ts"] = utc_now().replace(tzinfo=None).isoformat()
        return json.dumps(sign_frame(frame, stand_in.key))

    odd = [
        '{"v":1,"type":[]}',
        '{"v":1,"type":{"a":1}}',
        naive_ts(stand_in.register()),
    ]
    for frame in odd:
        code, _ = reject_of(await first_frame_refusal(fleet.hub.url, frame))
        assert code == "protocol_error"
    await expect_denied_connects(fleet, before, len(odd))

    dropped_before = dropped(fleet)
    async with raw_agent(fleet.hub.url, stand_in) as agent:
        for frame in [*odd[:2], naive_ts(agent.codec.encode(AgentHeartbeat()))]:
            await agent.ws.send_message(frame)
        await eventually(lambda: dropped(fleet) == dropped_before + 3)
        await round_trip(fleet, agent, stand_in)
    assert fleet.hub_log_count("Traceback") == tracebacks
    await assert_fleet_serves(fleet)


async def test_a_refusal_quotes_only_a_little_of_the_frame(fleet: AttackFleet) -> None:
    """Regression: the reject reason, the log and the audit row once quoted a 1 MiB ``type``
    or ``v`` in full, so each unauthenticated connection could write a megabyte to the audit."""
    before = len(denied_connects(fleet))
    huge = "x" * (MIB - 100)
    for frame in ({"v": 1, "type": huge}, {"v": huge, "type": "agent.register"}):
        code, reason = reject_of(await first_frame_refusal(fleet.hub.url, json.dumps(frame)))
        assert code in ("protocol_error", "unsupported_version")
        assert len(reason) < 2 * SHOWN_VALUE_CHARS + 100, len(reason)
    rows = await expect_denied_connects(fleet, before, 2)
    assert all(len(json.dumps(row["detail"])) < 4 * SHOWN_VALUE_CHARS for row in rows)
    assert max(len(line) for line in fleet.hub.proc.lines) < 10_000
    await assert_fleet_serves(fleet)


# --- sizes ---------------------------------------------------------------------------------


async def closed_after_sending(ws: trio_websocket.WebSocketConnection, text: str) -> int | None:
    """Send ``text`` and return the close code the hub answers with."""
    try:
        await ws.send_message(text)
        while True:
            await ws.get_message()
    except trio_websocket.ConnectionClosed as closed:
        return close_code(closed)


async def test_an_oversized_frame_closes_only_its_own_socket(fleet: AttackFleet) -> None:
    with trio.fail_after(20):
        for size in (2 * MIB, MIB + 1):
            async with agent_socket(fleet.hub.url) as ws:
                assert await closed_after_sending(ws, "x" * size) == 1009  # message too big

        stand_in = enroll_identity(fleet.hub, unique_name("oversized"))
        async with raw_agent(fleet.hub.url, stand_in) as agent:
            await eventually(lambda: status_of(fleet.hub, stand_in.name) == "online")
            big = json.dumps({"v": 1, "type": "agent.heartbeat", "pad": "x" * (2 * MIB)})
            assert await closed_after_sending(agent.ws, big) == 1009
        await eventually(lambda: status_of(fleet.hub, stand_in.name) == "offline")
    await assert_fleet_serves(fleet)


def initialize_with(pad: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"pad": pad}}


def padded_initialize(size: int) -> bytes:
    overhead = len(json.dumps(initialize_with("")))
    data = json.dumps(initialize_with("x" * (size - overhead))).encode()
    assert len(data) == size
    return data


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def post_oversized_bodies(hub: RunningHub) -> None:
    """Bodies over each limit, with a Content-Length and chunked without one: all 413."""
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    too_big = padded_initialize(MCP_BODY_LIMIT + 1)
    with httpx.Client(base_url=hub.url, timeout=30) as http:
        for content in (too_big, chunks(too_big)):
            refused = http.post("/mcp", content=content, headers={**MCP_HEADERS, **auth})
            mcp_refusal(refused, 413, "body_too_large")
            assert "mcp-session-id" not in refused.headers
        probe = json.dumps({"agent": "alpha", "probe": MEMORY, "params": {"pad": "x" * REST_BODY_LIMIT}})
        refused = http.post("/api/v1/probe", content=chunks(probe.encode()), headers=auth)
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "body_too_large"
        refused = http.post("/api/v1/agents/enroll", content=chunks(b"{" + b" " * REST_BODY_LIMIT + b"}"))
        assert refused.status_code == 413

        # just under the limit is served, so the limit is the one refusing
        fits = http.post(
            "/mcp", content=padded_initialize(MCP_BODY_LIMIT - 1024), headers={**MCP_HEADERS, **auth}
        )
        assert fits.status_code == 200
        http.delete("/mcp", headers={**auth, "mcp-session-id": fits.headers["mcp-session-id"]})


async def test_oversized_bodies_are_refused_before_anything_runs(fleet: AttackFleet) -> None:
    probes_before = len(audit_actions(fleet.hub, "rest.probe"))
    enrolls_before = len(audit_actions(fleet.hub, "agent.enroll"))
    with trio.fail_after(60):
        await trio.to_thread.run_sync(post_oversized_bodies, fleet.hub)
    assert len(audit_actions(fleet.hub, "rest.probe")) == probes_before
    assert len(audit_actions(fleet.hub, "agent.enroll")) == enrolls_before
    await assert_fleet_serves(fleet)


def post_deeply_nested_bodies(hub: RunningHub) -> None:
    """Small bodies nested past any JSON parser's depth, bare and inside tool arguments: 4xx, never 500."""
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    deep = "[" * 5000 + "]" * 5000
    call = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","arguments":' + deep + "}}"
    with httpx.Client(base_url=hub.url, timeout=30) as http:
        for body in (deep, call):
            refused = http.post("/mcp", content=body.encode(), headers={**MCP_HEADERS, **auth})
            assert 400 <= refused.status_code < 500, (refused.status_code, refused.text[:200])


async def test_a_deeply_nested_body_is_refused_without_a_traceback(fleet: AttackFleet) -> None:
    with trio.fail_after(60):
        await trio.to_thread.run_sync(post_deeply_nested_bodies, fleet.hub)
    assert "RecursionError" not in fleet.hub.proc.output
    await assert_fleet_serves(fleet)

"""The daemon against a scripted fake hub: register, ack, heartbeats, probes, rejects, reconnects."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
import trio

from sonde.agent.config import AgentConfig
from sonde.agent.connection import describe_transport_error, sole_error, websocket_url
from sonde.agent.daemon import (
    ACK_TIMEOUT_S,
    STABLE_CONNECTION_S,
    AgentDaemon,
    backoff_delay,
)
from sonde.agent.exit_codes import EXIT_NOT_ENROLLED, EXIT_OK, EXIT_REJECTED, EXIT_ROOT
from sonde.agent.identity import code_hash
from sonde.agent.main import agent_main, run_agent
from sonde.protocol.errors import AgentUnavailable
from sonde.protocol.messages import (
    HubReject,
    JsonValue,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
    RejectPayload,
)
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text
from sonde.transport import Transport
from tests.agent.fakehub import AGENT_ID, FakeHub
from tests.agent.probes import gone, registry_for_tests, wait_for_child
from tests.e2e.procs import SONDE
from tests.runtime.wspair import websocket_pair
from tests.subprocs import run_any

TINY_DELAY_S = 0.01


def probe(request_id: str, name: str, params: dict[str, JsonValue] | None = None) -> ProbeRequest:
    return ProbeRequest(payload=ProbeRequestPayload(request_id=request_id, probe=name, params=params or {}))


# --- pure parts -------------------------------------------------------------


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 5, 6, 7, 100, 10_000])
def test_backoff_delay_is_full_jitter_within_bounds(attempt: int) -> None:
    rng = random.Random(attempt)
    bound = min(60, 2**attempt) if attempt < 64 else 60
    delays = [backoff_delay(attempt, rng) for _ in range(2000)]
    assert all(0 <= d <= bound for d in delays)
    assert max(delays) > bound * 0.95
    assert min(delays) < bound * 0.05


def test_backoff_delay_respects_a_smaller_cap() -> None:
    rng = random.Random(3)
    assert all(backoff_delay(9, rng, max_s=0.5) <= 0.5 for _ in range(100))


@pytest.mark.parametrize(
    ("hub_url", "ws_url"),
    [
        ("http://127.0.0.1:3000", "ws://127.0.0.1:3000/ws/agent"),
        ("https://hub.example.com/", "wss://hub.example.com/ws/agent"),
        ("https://example.com/sonde", "wss://example.com/sonde/ws/agent"),
    ],
)
def test_websocket_url(hub_url: str, ws_url: str) -> None:
    assert websocket_url(hub_url) == ws_url


async def test_a_hub_that_is_down_is_said_as_the_bridge_says_it() -> None:
    """It was trio's "all attempts to connect to 127.0.0.1:N failed" in the agent's retry lines."""
    with trio.socket.socket() as probe:
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(OSError, match="all attempts to connect") as refused:
        await trio.open_tcp_stream("127.0.0.1", port)
    assert describe_transport_error(refused.value) == (
        f"connection refused: nothing listens at 127.0.0.1:{port} (is the hub running?)"
    )


def test_refuses_root_unless_allowed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert run_agent(FakeHub().config("http://127.0.0.1:1")) == EXIT_ROOT
    assert "sonde start: refusing to run as root" in capsys.readouterr().err  # as its other refusals
    # allowed: it gets past the root check (and stops at the enrollment check)
    assert run_agent(AgentConfig(hub_url="http://127.0.0.1:1"), allow_root=True) == EXIT_NOT_ENROLLED


def test_requires_an_enrolled_config(capsys: pytest.CaptureFixture[str]) -> None:
    login_only = AgentConfig(hub_url="http://127.0.0.1:1", api_key="sk_1")
    assert run_agent(login_only, allow_root=True) == EXIT_NOT_ENROLLED
    assert (
        "not enrolled: run `sonde enroll --hub URL` first (it asks for the token)" in capsys.readouterr().err
    )


# --- against a real trio-websocket server on 127.0.0.1 ------------------------


@asynccontextmanager
async def hub_on_a_port(hub: FakeHub) -> AsyncIterator[tuple[trio.Nursery, AgentConfig]]:
    """Serve ``hub`` on a port; the yielded nursery (for the agent) ends first, while the hub still answers."""
    async with trio.open_nursery() as hub_nursery:
        port = await hub_nursery.start(hub.serve)
        async with trio.open_nursery() as agent_nursery:
            yield agent_nursery, hub.config(f"http://127.0.0.1:{port}")
            agent_nursery.cancel_scope.cancel()
        hub_nursery.cancel_scope.cancel()


async def test_registers_signed_heartbeats_and_answers_probes() -> None:
    hub = FakeHub(heartbeat_interval_s=1.0)
    with trio.fail_after(15):
        async with hub_on_a_port(hub) as (nursery, config):
            agent = await nursery.start(
                partial(agent_main, config, registry_for_tests(), handle_signals=False)
            )
            (link,) = await hub.wait_for_links(1)
            response = await link.request(probe("mem-1", "system.memory.usage"))
            await hub.first_heartbeat.wait()
            await agent.stop("test over")
            await hub.disconnected.wait()
    assert response.payload.request_id == "mem-1"
    assert response.payload.result["total_bytes"] > 0  # type: ignore[operator]
    register = hub.registers[0]  # the fake hub verified its signature with the agent's key
    assert register.agent_id == AGENT_ID
    assert register.payload.name == "test-agent"
    assert register.payload.attestation.code_hash == code_hash()
    assert {p.name for p in register.payload.packs} == {"system", "testpack"}
    assert hub.heartbeats[0][1] == 0
    assert hub.close_codes == [1000]


@pytest.mark.parametrize("code", ["revoked", "unknown_agent"])
async def test_revoked_or_unknown_agent_stops_without_retrying(code: str) -> None:
    hub = FakeHub(script=[f"bound-reject:{code}"])
    with trio.fail_after(10):
        async with hub_on_a_port(hub) as (_, config):
            exit_code = await agent_main(
                config, registry_for_tests(), handle_signals=False, max_delay_s=TINY_DELAY_S
            )
    assert exit_code == EXIT_REJECTED
    assert len(hub.connections) == 1


@pytest.mark.parametrize("code", ["revoked", "unknown_agent"])
async def test_a_reject_made_for_another_register_is_not_obeyed(code: str) -> None:
    # The hub signs a reject for any register: a stranger's, made with a key of its own, is
    # answered "unknown_agent", and a man in the middle of ws:// could hand that on. Fresh and
    # signed by the pinned key, but not echoing this register's nonce and agent id: not final.
    hub = FakeHub(script=[f"reject:{code}", "ack"])
    response = await answer_once_linked(hub, 5)
    assert len(hub.registers) == 2
    assert response.payload.result == {"value": 5, "secret": ""}


async def answer_once_linked(hub: FakeHub, value: int) -> ProbeResponse:
    """Run the agent against ``hub`` until it links, ask it one echo probe, stop it: the answer."""
    with trio.fail_after(15):
        async with hub_on_a_port(hub) as (nursery, config):
            main = partial(
                agent_main, config, registry_for_tests(), handle_signals=False, max_delay_s=TINY_DELAY_S
            )
            agent = await nursery.start(main)
            (link,) = await hub.wait_for_links(1)
            response = await link.request(probe("after", "testpack.echo.value", {"value": value}))
            await agent.stop("test over")
    return response


async def test_reconnects_through_refusals_drops_rejects_and_impostors() -> None:
    hub = FakeHub(script=["refuse", "drop", "reject:hub_shutting_down", "impostor", "drop", "ack"])
    response = await answer_once_linked(hub, 3)
    assert len(hub.connections) == 6
    assert len(hub.registers) == 5  # the refused handshake never got to register
    assert response.payload.result == {"value": 3, "secret": ""}


async def test_sigterm_cancels_probes_and_closes_normally() -> None:
    hub = FakeHub(heartbeat_interval_s=30)
    exit_codes: list[int] = []
    agent_done = trio.Event()
    with trio.fail_after(15):
        async with hub_on_a_port(hub) as (nursery, config):

            async def run_agent_task(task_status: trio.TaskStatus[AgentDaemon]) -> None:
                exit_codes.append(await agent_main(config, registry_for_tests(), task_status=task_status))
                agent_done.set()

            await nursery.start(run_agent_task)
            (link,) = await hub.wait_for_links(1)

            async def ask_then_lose_the_agent() -> None:
                with pytest.raises(AgentUnavailable):
                    await link.request(probe("sleeper", "testpack.sleep.process"))

            nursery.start_soon(ask_then_lose_the_agent)
            child = await wait_for_child("sleep")
            os.kill(os.getpid(), signal.SIGTERM)
            await hub.disconnected.wait()
            await agent_done.wait()
    assert exit_codes == [EXIT_OK]
    assert hub.close_codes == [1000]
    assert gone(child)


async def test_a_dropped_link_kills_its_probes_and_the_agent_reconnects() -> None:
    hub = FakeHub()
    with trio.fail_after(15):
        async with hub_on_a_port(hub) as (nursery, config):
            main = partial(
                agent_main, config, registry_for_tests(), handle_signals=False, max_delay_s=TINY_DELAY_S
            )
            agent = await nursery.start(main)
            (first,) = await hub.wait_for_links(1)

            async def ask_then_lose_the_agent() -> None:
                with pytest.raises(AgentUnavailable):
                    await first.request(probe("sleeper", "testpack.sleep.process"))

            nursery.start_soon(ask_then_lose_the_agent)
            child = await wait_for_child("sleep")
            await first.transport.close(1001, "hub going away")
            _, second = await hub.wait_for_links(2)
            response = await second.request(probe("again", "testpack.echo.value", {"value": 5}))
            await agent.stop("test over")
    assert response.payload.result["value"] == 5
    assert gone(child)


# --- in memory, on the autojump clock: exact backoff schedule ------------------


@dataclass
class ScriptedConnector:
    """Refuses the first ``failures`` connections, then joins the agent to ``hub`` in memory."""

    hub: FakeHub
    failures: int = 0
    calls: list[float] = field(default_factory=list)

    @asynccontextmanager
    async def __call__(self, url: str) -> AsyncIterator[Transport]:
        assert url == "ws://hub.test/ws/agent"
        self.calls.append(trio.current_time())
        if len(self.calls) <= self.failures:
            raise OSError("connection refused")
        try:
            async with websocket_pair() as (agent_transport, hub_transport), trio.open_nursery() as nursery:
                nursery.start_soon(self.hub.serve_transport, hub_transport)
                yield agent_transport
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # errors of the body come out as they went in
            raise sole_error(group) from None


async def linked(hub: FakeHub, *, seed: int, links: int, failures: int = 0) -> ScriptedConnector:
    """Run the agent against ``hub``, its backoff drawn from ``Random(seed)``, until ``hub`` has
    made ``links`` links with it (its first ``failures`` connects refused); the connector, which
    holds when each connect began."""
    connector = ScriptedConnector(hub, failures)
    async with trio.open_nursery() as nursery:
        config = hub.config("http://hub.test")
        main = partial(
            agent_main,
            config,
            registry_for_tests(),
            connect=connector,
            rng=random.Random(seed),
            handle_signals=False,
        )
        nursery.start_soon(main)
        await hub.wait_for_links(links)
        nursery.cancel_scope.cancel()
    return connector


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


async def test_backoff_schedule_on_the_virtual_clock(autojump_clock: trio.abc.Clock) -> None:
    hub = FakeHub()
    expected_rng = random.Random(42)
    expected = [round(backoff_delay(attempt, expected_rng), 6) for attempt in range(5)]
    connector = await linked(hub, seed=42, links=1, failures=5)
    assert gaps(connector.calls) == expected
    assert all(0 <= d <= 2**attempt for attempt, d in enumerate(expected))


async def test_stable_connection_resets_the_backoff(autojump_clock: trio.abc.Clock) -> None:
    # not a multiple of the heartbeat: the fake hub's trio-websocket server cannot pong while
    # closing, and the agent pings right after each heartbeat
    hold_s = STABLE_CONNECTION_S + 15
    hub = FakeHub(script=[f"ack:{hold_s}", "ack:5", "ack:5"], heartbeat_interval_s=10)
    expected_rng = random.Random(7)
    # stable first link -> attempt 0; then two short links -> attempts 1 and 2
    delays = [backoff_delay(attempt, expected_rng) for attempt in (0, 1, 2)]
    connector = await linked(hub, seed=7, links=4)
    assert gaps(connector.calls) == [round(d, 6) for d in (hold_s + delays[0], 5 + delays[1], 5 + delays[2])]
    beats = [round(at - connector.calls[0], 6) for at, _ in hub.heartbeats[:3]]
    assert beats == [0.0, 10.0, 20.0]  # the first at once (Link._heartbeat_loop)


async def test_a_hub_that_stops_resets_the_backoff(autojump_clock: trio.abc.Clock) -> None:
    # each short link ended by the hub going away (1001: a restart) is retried as after a stable
    # one, so a second restart soon after the first does not find the backoff grown; a short
    # link that ends otherwise still grows it
    hub = FakeHub(script=["stop:5", "stop:5", "ack:5", "stop:5"], heartbeat_interval_s=10)
    expected_rng = random.Random(11)
    delays = [backoff_delay(attempt, expected_rng) for attempt in (0, 0, 1, 0)]
    connector = await linked(hub, seed=11, links=5)
    assert gaps(connector.calls) == [round(5 + d, 6) for d in delays]


async def test_no_ack_within_the_timeout_is_retried(autojump_clock: trio.abc.Clock) -> None:
    hub = FakeHub(script=["silent"])
    connector = ScriptedConnector(hub)
    expected_rng = random.Random(5)
    async with trio.open_nursery() as nursery:
        config = hub.config("http://hub.test")
        main = partial(
            agent_main,
            config,
            registry_for_tests(),
            connect=connector,
            rng=random.Random(5),
            handle_signals=False,
        )
        agent = await nursery.start(main)
        await agent.stop("test over")
    assert gaps(connector.calls) == [round(ACK_TIMEOUT_S + backoff_delay(0, expected_rng), 6)]


async def test_revoked_mid_link_stops_the_agent(autojump_clock: trio.abc.Clock) -> None:
    hub = FakeHub()
    connector = ScriptedConnector(hub)
    async with trio.open_nursery() as nursery:
        config = hub.config("http://hub.test")
        exit_codes: list[int] = []

        async def run() -> None:
            exit_codes.append(
                await agent_main(config, registry_for_tests(), connect=connector, handle_signals=False)
            )

        nursery.start_soon(run)
        (link,) = await hub.wait_for_links(1)
        await link.send(HubReject(payload=RejectPayload(code="revoked", reason="revoked by an admin")))
    assert exit_codes == [EXIT_REJECTED]
    assert len(connector.calls) == 1


KEY = private_key_to_text(new_private_key())
HUB_KEY = public_key_to_text(new_private_key().public_key())


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (None, "(there is no {path})"),
        (
            {"hubUrl": "http://127.0.0.1:1", "apiKey": "sonde_x"},
            "({path} lacks agentId, name, privateKey, hubPublicKey)",
        ),
        (
            {"hubUrl": "http://127.0.0.1:1", "agentId": "a", "privateKey": KEY, "hubPublicKey": HUB_KEY},
            "({path} lacks name)",
        ),
    ],
)
def test_sonde_start_names_the_config_and_what_it_lacks(
    tmp_path: Path, config: dict[str, str] | None, says: str
) -> None:
    path = tmp_path / ".sonde" / "config.json"
    if config is not None:
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        path.chmod(0o600)
    done = run_any([*SONDE, "start", "--allow-root"], env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == EXIT_NOT_ENROLLED
    assert (
        f"sonde start: not enrolled: run `sonde enroll --hub URL` first (it asks for the token) {says.format(path=path)}"
        in (done.stderr)
    )


def test_sonde_start_refuses_a_config_others_may_change(tmp_path: Path) -> None:
    path = tmp_path / ".sonde" / "config.json"
    path.parent.mkdir(mode=0o700)
    path.write_text(json.dumps({"hubUrl": "http://127.0.0.1:1", "name": "web-1"}))
    path.chmod(0o666)
    done = run_any([*SONDE, "start", "--allow-root"], env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 2  # a setting to mend: the systemd unit does not restart it for that
    assert f"sonde start: config {path} has mode 666: others can change it" in done.stderr
    assert f"run `chmod go-w {path}`" in done.stderr


async def test_a_heartbeat_interval_below_a_second_is_taken_as_one(autojump_clock: trio.abc.Clock) -> None:
    # a hostile hub asking a heartbeat every microsecond had the agent send 68,000 in 10 s
    hub = FakeHub(heartbeat_interval_s=0.000001)
    async with trio.open_nursery() as nursery:
        main = partial(
            agent_main,
            hub.config("http://hub.test"),
            registry_for_tests(),
            connect=ScriptedConnector(hub),
            handle_signals=False,
        )
        agent = await nursery.start(main)
        await hub.wait_for_links(1)
        with trio.move_on_after(10):  # a 12th heartbeat inside 10 s ends the wait (and the test) at once
            await hub.wait_for_heartbeats(12)
        await agent.stop("test over")
    times = [at for at, _ in hub.heartbeats]
    assert 9 <= len(times) <= 11
    assert all(later - earlier == pytest.approx(1.0) for earlier, later in itertools.pairwise(times))

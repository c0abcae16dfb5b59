"""Secrets in probe results and errors never reach the wire: the agent's runner over a real
WebSocket pair, and `sonde serve --json`'s tool server, with a test-only pack that leaks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from sonde.agent.config import AgentConfig
from sonde.agent.daemon import AgentDaemon
from sonde.agent.runner import ProbeRunner
from sonde.agent.scrubber import Scrubber
from sonde.agent.serve import create_tool_server
from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.context import ProbeContext
from sonde.packs.registry import PackRegistry
from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import ProbeFailed
from sonde.protocol.messages import Message, ProbeRequest, ProbeRequestPayload
from sonde.protocol.serve_lines import CallToolRequest, ErrorResponse, SuccessResponse, encode_line
from sonde.protocol.signing import new_private_key, private_key_to_text, public_key_to_text
from sonde.runtime import Link, open_link
from sonde.transport import CLOSE_NORMAL, Transport
from tests.runtime.wspair import websocket_pair

DB_PASSWORD = "pg-Pa55w0rd-1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
API_KEY = "ak-0123456789"
OPERATOR_SECRET = "EMP-123456"
LEAKS = (DB_PASSWORD, AWS_SECRET, API_KEY, OPERATOR_SECRET)

LEAKY_PACK = Pack("leaky", "0.0.1", "test-only probes whose output holds secrets")


class LeakyConfig(Result):
    dsn: str
    environment: list[str]
    api_key: str
    note: str


@LEAKY_PACK.probe("leaky.config.read", "Returns a config full of secrets.")
async def read_config(ctx: ProbeContext, params: NoParams) -> LeakyConfig:
    return LeakyConfig(
        dsn=f"postgres://app:{DB_PASSWORD}@db:5432/app",
        environment=["HOME=/var/lib/app", f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}"],
        api_key=API_KEY,
        note=f"badge {OPERATOR_SECRET}",
    )


@LEAKY_PACK.probe("leaky.connect.fail", "Fails with the connection string in its message.")
async def fail_connect(ctx: ProbeContext, params: NoParams) -> LeakyConfig:
    raise ValueError(f"cannot connect to postgres://app:{DB_PASSWORD}@db:5432/app")


SCRUBBER = Scrubber([r"EMP-\d{6}"])


async def ignore(message: Message) -> None:
    pass


class RecordingTransport:
    """A `Transport` that keeps every frame it receives, as sent on the wire."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.frames: list[str] = []

    async def send_text(self, text: str) -> None:
        await self.inner.send_text(text)

    async def receive_text(self) -> str:
        frame = await self.inner.receive_text()
        self.frames.append(frame)
        return frame

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        await self.inner.close(code, reason)


@asynccontextmanager
async def hub_talking_to_agent() -> AsyncIterator[tuple[Link, list[str]]]:
    """A hub link to a `ProbeRunner` scrubbing like the daemon does; yields it and the raw frames."""
    hub_key, agent_key = new_private_key(), new_private_key()
    hub_codec = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key())
    agent_codec = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1")
    async with websocket_pair() as (agent_transport, hub_side), trio.open_nursery() as probes:
        hub_transport = RecordingTransport(hub_side)
        runner = ProbeRunner(
            PackRegistry.of([LEAKY_PACK]), ProbeContext(), probes, scrub=SCRUBBER.scrub_result
        )
        async with open_link(agent_transport, agent_codec, runner.on_message) as agent_link:
            runner.bind(agent_link)
            async with open_link(hub_transport, hub_codec, ignore) as hub_link:
                yield hub_link, hub_transport.frames
        probes.cancel_scope.cancel()


def request(request_id: str, probe: str) -> ProbeRequest:
    return ProbeRequest(payload=ProbeRequestPayload(request_id=request_id, probe=probe, params={}))


async def test_a_probe_result_is_scrubbed_before_it_is_sent(autojump_clock: trio.abc.Clock) -> None:
    async with hub_talking_to_agent() as (hub, frames):
        response = await hub.request(request("r1", "leaky.config.read"))
    assert response.payload.result == {
        "dsn": "postgres://app:[REDACTED]@db:5432/app",
        "environment": ["HOME=/var/lib/app", "AWS_SECRET_ACCESS_KEY=[REDACTED]"],
        "api_key": "[REDACTED]",
        "note": "badge [REDACTED]",
    }
    assert response.payload.meta.redactions == 4
    assert frames
    for leak in LEAKS:
        assert not any(leak in frame for frame in frames), leak


async def test_a_probe_error_is_scrubbed_before_it_is_sent(autojump_clock: trio.abc.Clock) -> None:
    async with hub_talking_to_agent() as (hub, frames):
        with pytest.raises(ProbeFailed) as caught:
            await hub.request(request("r2", "leaky.connect.fail"))
    assert caught.value.message == "cannot connect to postgres://app:[REDACTED]@db:5432/app"
    assert not any(DB_PASSWORD in frame for frame in frames)


def test_the_daemon_hands_its_runner_the_configured_scrubber() -> None:
    config = AgentConfig(
        hub_url="https://hub.example.com",
        agent_id="agent-1",
        name="web-1",
        private_key=private_key_to_text(new_private_key()),
        hub_public_key=public_key_to_text(new_private_key().public_key()),
        scrub_patterns=[r"EMP-\d{6}"],
    )
    daemon = AgentDaemon(
        config,
        PackRegistry.of([LEAKY_PACK]),
        connect=None,
        rng=None,
        max_delay_s=1,  # type: ignore[arg-type]
    )
    assert daemon.scrubber.operator_patterns == (r"EMP-\d{6}",)
    assert daemon.scrubber.scrub_text(OPERATOR_SECRET) == ("[REDACTED]", 1)


async def test_serve_json_scrubs_outputs_and_errors() -> None:
    server = create_tool_server(
        PackRegistry.of([LEAKY_PACK]), ["leaky.config.read", "leaky.connect.fail"], SCRUBBER
    )
    answer = await server.answer(CallToolRequest(id=1, name="leaky.config.read"))
    assert isinstance(answer, SuccessResponse)
    assert answer.result.output["dsn"] == "postgres://app:[REDACTED]@db:5432/app"
    failure = await server.answer(CallToolRequest(id=2, name="leaky.connect.fail"))
    assert isinstance(failure, ErrorResponse)
    lines = encode_line(answer) + encode_line(failure)
    for leak in LEAKS:
        assert leak.encode() not in lines, leak
    assert json.loads(encode_line(failure))["error"]["message"].endswith("app:[REDACTED]@db:5432/app")

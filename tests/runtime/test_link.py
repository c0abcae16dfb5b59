"""The link: correlation, cancellation, dead peers and heartbeats, on the autojump clock."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
import trio.testing

from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import AgentUnavailable, ProbeFailed
from sonde.protocol.messages import (
    AgentHeartbeat,
    HeartbeatPayload,
    Message,
    ProbeCancel,
    ProbeError,
    ProbeErrorPayload,
    ProbeRequest,
    ProbeRequestPayload,
    ProbeResponse,
    ProbeResponsePayload,
)
from sonde.protocol.signing import new_private_key
from sonde.runtime import Link, open_link
from sonde.transport import Transport
from tests.runtime.wspair import websocket_pair


def codecs() -> tuple[FrameCodec, FrameCodec]:
    hub_key, agent_key = new_private_key(), new_private_key()
    return (
        FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key()),
        FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1"),
    )


def beating_link(
    transport: Transport, codec: FrameCodec, interval_s: float
) -> AbstractAsyncContextManager[Link]:
    """An agent-side link that sends a heartbeat every ``interval_s`` and ignores what it receives."""
    return open_link(
        transport,
        codec,
        ignore,
        heartbeat_interval_s=interval_s,
        make_heartbeat=lambda: AgentHeartbeat(payload=HeartbeatPayload(probes_in_flight=0)),
    )


def probe_request(request_id: str, probe: str = "system.memory.usage") -> ProbeRequest:
    return ProbeRequest(payload=ProbeRequestPayload(request_id=request_id, probe=probe))


def response_to(message: ProbeRequest) -> ProbeResponse:
    payload = ProbeResponsePayload(
        request_id=message.payload.request_id,
        probe=message.payload.probe,
        result={"echo": message.payload.request_id},
        duration_ms=1,
    )
    return ProbeResponse(payload=payload)


async def ignore(message: Message) -> None:
    pass


@asynccontextmanager
async def linked(on_agent_message: object, **hub_options: object) -> AsyncIterator[tuple[Link, Link]]:
    hub_codec, agent_codec = codecs()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(agent_transport, agent_codec, on_agent_message) as agent_link:  # type: ignore[arg-type]
            async with open_link(hub_transport, hub_codec, ignore, **hub_options) as hub_link:  # type: ignore[arg-type]
                yield hub_link, agent_link


async def test_thousand_concurrent_requests_answered_in_random_order(autojump_clock: trio.abc.Clock) -> None:
    inbox: list[ProbeRequest] = []
    all_in = trio.Event()

    async def collect(message: Message) -> None:
        assert isinstance(message, ProbeRequest)
        inbox.append(message)
        if len(inbox) == 1000:
            all_in.set()

    results: dict[str, ProbeResponse] = {}
    async with linked(collect) as (hub_link, agent_link):

        async def ask(i: int) -> None:
            results[f"r{i}"] = await hub_link.request(probe_request(f"r{i}"))

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(ask, i)
            await all_in.wait()
            random.Random(7).shuffle(inbox)
            for message in inbox:
                await agent_link.send(response_to(message))
        assert len(results) == 1000
        assert all(r.payload.result == {"echo": rid} for rid, r in results.items())
        stats = hub_link.statistics()
        assert stats.in_flight == 0
        assert stats.late == 0
        assert stats.received == 1000


async def test_cancelled_caller_sends_exactly_one_cancel(autojump_clock: trio.abc.Clock) -> None:
    seen: list[Message] = []

    async def collect(message: Message) -> None:
        seen.append(message)

    async with linked(collect) as (hub_link, agent_link):
        with trio.move_on_after(5):
            await hub_link.request(probe_request("slow"))
        await trio.sleep(1)
        cancels = [m for m in seen if isinstance(m, ProbeCancel)]
        assert [c.payload.request_id for c in cancels] == ["slow"]
        assert hub_link.statistics().in_flight == 0
        # the response that comes later is dropped and counted, never delivered
        await agent_link.send(response_to(probe_request("slow")))
        await trio.sleep(1)
        assert hub_link.statistics().late == 1


async def test_late_response_never_reaches_another_request(autojump_clock: trio.abc.Clock) -> None:
    requests: list[ProbeRequest] = []

    async def collect(message: Message) -> None:
        if isinstance(message, ProbeRequest):
            requests.append(message)

    async with linked(collect) as (hub_link, agent_link):
        with trio.move_on_after(1):
            await hub_link.request(probe_request("old"))
        async with trio.open_nursery() as nursery:
            got: list[ProbeResponse] = []

            async def ask_new() -> None:
                got.append(await hub_link.request(probe_request("new")))

            nursery.start_soon(ask_new)
            await trio.sleep(1)
            await agent_link.send(response_to(requests[0]))  # the old one, late
            await trio.sleep(1)
            assert not got
            await agent_link.send(response_to(requests[1]))
        assert got[0].payload.request_id == "new"


async def test_probe_error_becomes_probe_failed(autojump_clock: trio.abc.Clock) -> None:
    agent: list[Link] = []

    async def answer_error(message: Message) -> None:
        assert isinstance(message, ProbeRequest)
        payload = ProbeErrorPayload(request_id=message.payload.request_id, code="unknown_probe", message="no")
        await agent[0].send(ProbeError(payload=payload))

    async with linked(answer_error) as (hub_link, agent_link):
        agent.append(agent_link)
        with pytest.raises(ProbeFailed) as caught:
            await hub_link.request(probe_request("r1"))
        assert caught.value.code == "unknown_probe"


async def test_dead_peer_fails_all_pending_at_once(autojump_clock: trio.abc.Clock) -> None:
    failures: list[tuple[float, str]] = []
    hub_codec, _ = codecs()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(hub_transport, hub_codec, ignore) as hub_link:
            async with trio.open_nursery() as nursery:

                async def ask(i: int) -> None:
                    try:
                        await hub_link.request(probe_request(f"r{i}"))
                    except AgentUnavailable as exc:
                        failures.append((trio.current_time(), str(exc)))

                for i in range(50):
                    nursery.start_soon(ask, i)
                await trio.sleep(3)
                start = trio.current_time()
                await agent_transport.close()
        assert len(failures) == 50
        assert all(at - start < 0.1 for at, _ in failures)
        assert all("agent disconnected" in text for _, text in failures)
        assert hub_link.closed
        with pytest.raises(AgentUnavailable):
            await hub_link.request(probe_request("after"))


async def test_heartbeats_on_schedule_and_silence_is_death(autojump_clock: trio.abc.Clock) -> None:
    beats: list[float] = []
    hub_codec, agent_codec = codecs()

    async def on_hub(message: Message) -> None:
        if isinstance(message, AgentHeartbeat):
            beats.append(trio.current_time())

    start = trio.current_time()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(hub_transport, hub_codec, on_hub, liveness_timeout_s=20) as hub_link:
            with trio.move_on_after(35):
                async with beating_link(agent_transport, agent_codec, interval_s=10):
                    await trio.sleep_forever()
            assert [round(b - start, 3) for b in beats] == [0.0, 10.0, 20.0, 30.0]
            assert not hub_link.closed
            # the agent link is gone but its socket closed: sleep until the hub notices or times out
            await hub_link.wait_closed()
        assert hub_link.closed


async def test_silent_peer_is_declared_dead_after_liveness_timeout(autojump_clock: trio.abc.Clock) -> None:
    hub_codec, _ = codecs()
    async with websocket_pair() as (_agent_transport, hub_transport):
        start = trio.current_time()
        async with open_link(hub_transport, hub_codec, ignore, liveness_timeout_s=60) as hub_link:
            await hub_link.wait_closed()
        assert trio.current_time() - start == pytest.approx(60)
        assert "silent" in hub_link.close_reason


async def test_frames_that_do_not_parse_are_dropped_and_counted(autojump_clock: trio.abc.Clock) -> None:
    # a frame failing its signature ends the link instead: tests/runtime/test_link_refusals.py
    hub_codec, _ = codecs()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(hub_transport, hub_codec, ignore) as hub_link:
            await agent_transport.send_text("{not json")
            await agent_transport.send_text('{"v":1,"type":"agent.future"}')
            await trio.sleep(1)
            stats = hub_link.statistics()
            assert stats.dropped == 2
            assert not hub_link.closed


async def test_heartbeat_sent_wakes_right_after_each_heartbeat(autojump_clock: trio.abc.Clock) -> None:
    hub_codec, agent_codec = codecs()
    woken: list[float] = []
    start = trio.current_time()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(hub_transport, hub_codec, ignore):
            with trio.move_on_after(35):
                async with beating_link(agent_transport, agent_codec, interval_s=10) as agent_link:
                    while True:
                        await agent_link.heartbeat_sent()
                        woken.append(trio.current_time() - start)
    assert [round(t, 3) for t in woken] == [0.0, 10.0, 20.0, 30.0]

"""A hub that stops reading: the agent holds at most ``max_in_flight`` answers, and drops the link.

End to end against the fake hub on 127.0.0.1 (its ``"deaf"`` step acks, sends probe requests
and never reads again, so the socket buffers fill), then in memory over a socket pair whose
hub side reads nothing, on the virtual clock. What the agent holds is counted, not its
memory: the probe tasks alive (each holds at most one answer the link has not taken) and the
runner's ``probes_in_flight``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
import trio.lowlevel
import trio.testing
import trio_websocket

from sonde.agent import daemon
from sonde.agent.connection import DISCONNECT_TIMEOUT_S, keep_alive
from sonde.agent.main import agent_main
from sonde.agent.runner import ProbeRunner
from sonde.packs.base import NoParams, Pack, Result
from sonde.packs.context import ProbeContext
from sonde.packs.registry import PackRegistry
from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import AgentUnavailable
from sonde.protocol.messages import (
    Envelope,
    ProbeCancel,
    ProbeCancelPayload,
    ProbeRequest,
    ProbeRequestPayload,
)
from sonde.protocol.signing import new_private_key
from sonde.runtime import Link, open_link
from sonde.transport import WebSocketTransport
from tests.agent.fakehub import FakeHub
from tests.agent.probes import TEST_PACK, Waiters, context_with

STALL_PACK = Pack("stallpack", "0.0.1", "a probe with a big answer")
ANSWER_CHARS = 60_000  # under the executor's 64 KiB: finished on the event loop, no worker thread
REQUESTS = 600  # 36 MB of answers: far more than the socket buffers on 127.0.0.1 take
LIMIT = 4
SMALLEST_BUFFER_BYTES = 1  # the kernel rounds it up to its minimum: a few KiB


class BigAnswer(Result):
    text: str


@STALL_PACK.probe("stallpack.big.answer", "Returns 60,000 characters.")
async def big_answer(ctx: ProbeContext, params: NoParams) -> BigAnswer:
    await trio.lowlevel.checkpoint()
    made = ctx.settings.for_pack("stallpack").get("made")
    if isinstance(made, Waiters):
        made.bump("started")
    return BigAnswer(text="x" * ANSWER_CHARS)


def probe(request_id: str, name: str = "stallpack.big.answer") -> ProbeRequest:
    return ProbeRequest(payload=ProbeRequestPayload(request_id=request_id, probe=name, params={}))


def probe_tasks() -> int:
    """Probe tasks alive in this process (`ProbeRunner._run_probe`, the whole task tree): each
    holds at most one answer the link has not taken yet."""
    tasks, count = [trio.lowlevel.current_root_task()], 0
    while tasks:
        task = tasks.pop()
        assert task is not None
        count += task.coro.cr_code is ProbeRunner._run_probe.__code__  # type: ignore[attr-defined]
        tasks.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


# --- the daemon against a hub on 127.0.0.1 that stops reading ------------------


@asynccontextmanager
async def agent_and_deaf_hub(hub: FakeHub, made: Waiters) -> AsyncIterator[Link]:
    """The real agent (`agent_main`) linked to ``hub``, whose first step is ``"deaf"``; yields
    the hub's end of the link. ``made.started`` counts the big answers the agent made."""
    async with trio.open_nursery() as hub_nursery:
        port = await hub_nursery.start(hub.serve)
        config = hub.config(f"http://127.0.0.1:{port}")
        async with trio.open_nursery() as agent_nursery:
            main = partial(
                agent_main,
                config.model_copy(update={"packs": {"stallpack": {"made": made}}}),
                PackRegistry.of([STALL_PACK, TEST_PACK]),
                handle_signals=False,
                max_delay_s=0.01,
            )
            await agent_nursery.start(main)
            (link,) = await hub.wait_for_links(1)
            yield link
            agent_nursery.cancel_scope.cancel()
        hub_nursery.cancel_scope.cancel()


async def test_a_hub_that_stops_reading_finds_at_most_max_in_flight_answers_held() -> None:
    hub = FakeHub(script=["deaf"], heartbeat_interval_s=30, max_probes_in_flight=LIMIT)
    held: list[int] = []
    made = Waiters()
    with trio.fail_after(60):
        async with agent_and_deaf_hub(hub, made) as link, trio.open_nursery() as sending:

            async def ask() -> None:
                for i in range(REQUESTS):
                    await link.send(probe(f"big-{i}"))  # may wait: the agent stops reading too
                    held.append(probe_tasks())

            sending.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked(cushion=0.2)  # the agent is as stuck as it gets
            held.append(probe_tasks())
            sending.cancel_scope.cancel()
    assert max(held) <= LIMIT
    assert held[-1] == LIMIT  # stuck, it holds a full set: the count sees the answers it holds
    assert made.started < REQUESTS  # past the limit the agent stopped taking requests, it did not hold them


async def test_a_hub_that_stops_reading_is_dropped_and_the_agent_reconnects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(daemon, "keep_alive", partial(keep_alive, interval_s=1.0))
    hub = FakeHub(script=["deaf", "ack"], max_probes_in_flight=LIMIT)
    with trio.fail_after(60):
        async with agent_and_deaf_hub(hub, Waiters()) as first:

            async def ask() -> None:
                with contextlib.suppress(AgentUnavailable):  # the agent may drop the link under the sends
                    for i in range(REQUESTS):
                        await first.send(probe(f"big-{i}"))

            async with trio.open_nursery() as sending:
                sending.start_soon(ask)
                _, second = await hub.wait_for_links(2)  # no pong: the first link ended, the agent came back
                sending.cancel_scope.cancel()
            response = await second.request(probe("after"))
    assert len(hub.connections) == 2
    assert response.payload.result == {"text": "x" * ANSWER_CHARS}


# --- in memory: a socket pair nobody reads, the virtual clock ------------------


@asynccontextmanager
async def deaf_hub_websockets() -> AsyncIterator[
    tuple[trio_websocket.WebSocketConnection, trio_websocket.WebSocketConnection]
]:
    """The agent's WebSocket and the hub's over a socket pair with the smallest buffers. After
    the handshake the hub's side reads nothing (a few KiB fill its buffers), but can still send."""
    agent_socket, hub_socket = trio.socket.socketpair()
    for sock in (agent_socket, hub_socket):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALLEST_BUFFER_BYTES)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALLEST_BUFFER_BYTES)
    agent_stream, hub_stream = trio.SocketStream(agent_socket), trio.SocketStream(hub_socket)
    hub_side: list[trio_websocket.WebSocketConnection] = []
    accepted = trio.Event()
    hub_reading = trio.CancelScope()

    async def accept() -> None:
        with hub_reading:
            async with trio.open_nursery() as reader:
                request = await trio_websocket.wrap_server_stream(reader, hub_stream)
                hub_side.append(await request.accept())
                accepted.set()

    async with agent_stream, hub_stream, trio.open_nursery() as nursery:
        nursery.start_soon(accept)
        agent = await trio_websocket.wrap_client_stream(nursery, agent_stream, "hub", "/ws/agent")
        await accepted.wait()
        hub_reading.cancel()  # the hub's reader task ends: nothing reads its side any more
        yield agent, hub_side[0]
        nursery.cancel_scope.cancel()


async def no_heartbeats() -> None:
    await trio.sleep_forever()


async def test_keepalive_closes_the_stream_under_a_hub_that_reads_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    writer_saw: list[BaseException] = []
    with trio.fail_after(3600):
        async with deaf_hub_websockets() as (agent, _), trio.open_nursery() as nursery:

            async def write() -> None:  # the link's writer, stuck in a send the hub never reads
                with pytest.raises(trio_websocket.ConnectionClosed) as caught:
                    await agent.send_message("x" * 100_000)
                writer_saw.append(caught.value)

            nursery.start_soon(write)
            await trio.testing.wait_all_tasks_blocked()
            start = trio.current_time()
            await keep_alive(agent, no_heartbeats, interval_s=30.0)
            assert trio.current_time() - start == 30.0 + 30.0 + DISCONNECT_TIMEOUT_S  # ping, no pong, close
    assert len(writer_saw) == 1  # the stream was closed under it


@asynccontextmanager
async def runner_and_deaf_hub(
    max_in_flight: int,
) -> AsyncIterator[tuple[ProbeRunner, trio.Nursery, trio_websocket.WebSocketConnection, FrameCodec]]:
    """A runner on a real link whose hub reads nothing; yields the runner, its probe nursery, the
    hub's WebSocket and the hub's codec (to send with)."""
    hub_key, agent_key = new_private_key(), new_private_key()
    hub_codec = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key())
    agent_codec = FrameCodec(signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1")
    async with deaf_hub_websockets() as (agent_ws, hub_ws), trio.open_nursery() as probes:
        runner = ProbeRunner(
            PackRegistry.of([TEST_PACK]), context_with(Waiters()), probes, max_in_flight=max_in_flight
        )
        async with open_link(WebSocketTransport(agent_ws), agent_codec, runner.on_message) as link:
            runner.bind(link)
            yield runner, probes, hub_ws, hub_codec
        probes.cancel_scope.cancel()


def echo(request_id: str) -> ProbeRequest:
    payload = ProbeRequestPayload(request_id=request_id, probe="testpack.echo.value", params={"value": 1})
    return ProbeRequest(payload=payload)


async def hub_sends(hub_ws: trio_websocket.WebSocketConnection, codec: FrameCodec, message: Envelope) -> None:
    await hub_ws.send_message(codec.encode(message))
    await trio.testing.wait_all_tasks_blocked()


async def test_an_answer_is_in_flight_until_the_link_takes_it(autojump_clock: trio.abc.Clock) -> None:
    sent = 0
    async with runner_and_deaf_hub(2) as (runner, probes, hub_ws, codec), trio.open_nursery() as hub:

        async def ask() -> None:
            nonlocal sent
            for i in range(200):  # past the socket, the link's queue and the writer: answers wait
                await hub_ws.send_message(codec.encode(echo(f"r{i}")))
                sent += 1

        hub.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert len(probes.child_tasks) <= 2  # all the answers this runner holds
        assert runner.probes_in_flight == len(probes.child_tasks)  # and what its heartbeat says
        hub.cancel_scope.cancel()
    assert sent < 200  # past the limit the agent stopped taking requests (a `busy` waits to go out)


async def test_a_cancel_drops_an_answer_waiting_for_the_link_and_frees_its_slot(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with runner_and_deaf_hub(2) as (runner, probes, hub_ws, codec):
        waiting: list[str] = []
        for i in range(100):  # until two answers wait: the link's queue and its writer are full
            await hub_sends(hub_ws, codec, echo(f"r{i}"))
            if runner.probes_in_flight > len(waiting):
                waiting.append(f"r{i}")
            if len(waiting) == 2:
                break
        assert runner.probes_in_flight == 2
        await hub_sends(hub_ws, codec, ProbeCancel(payload=ProbeCancelPayload(request_id=waiting[0])))
        assert runner.probes_in_flight == 1
        assert len(probes.child_tasks) == 1
        await hub_sends(hub_ws, codec, echo("after-cancel"))  # takes the freed slot, and waits too
        assert runner.probes_in_flight == 2
        runner.cancel_all()
        await trio.testing.wait_all_tasks_blocked()
        assert runner.probes_in_flight == 0
        assert len(probes.child_tasks) == 0

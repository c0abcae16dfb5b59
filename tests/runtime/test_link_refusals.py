"""Frames a link refuses: a clock step mid-link, bad MACs, replays, garbage; on the autojump clock.

The receiving codec's clock is stepped (`SteppedClock`), as an NTP step on one machine
would: every frame after the step fails the timestamp window. Regression: the link
dropped such frames one by one but counted each as a sign of life, so the agent stayed
"online" while every probe timed out, forever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
import trio
import trio.testing

from sonde.protocol.codec import FrameCodec
from sonde.protocol.errors import AgentUnavailable, ProbeFailed
from sonde.protocol.messages import AgentHeartbeat, HeartbeatPayload, Message, utc_now
from sonde.protocol.signing import new_private_key
from sonde.runtime import DROPPED_LOG_INTERVAL_S, DROPPED_LOGGED_EACH, Link, MessageHandler, open_link
from sonde.transport import CLOSE_POLICY, Transport
from tests.runtime.test_link import ignore, probe_request
from tests.runtime.wspair import websocket_pair

HEARTBEAT_S = 10.0
LIVENESS_S = 25.0
STEP_AT_S = 15.0  # between the first and second heartbeat
CLOCK_WORDS = "clocks disagree (is NTP running on both?)"


@dataclass
class SteppedClock:
    """A wall clock that a test steps by ``offset_s``."""

    offset_s: float = 0.0

    def __call__(self) -> datetime:
        return utc_now() + timedelta(seconds=self.offset_s)


def codec_pair(hub_clock: SteppedClock, agent_clock: SteppedClock) -> tuple[FrameCodec, FrameCodec]:
    hub_key, agent_key = new_private_key(), new_private_key()
    hub = FrameCodec(signing_key=hub_key, peer_key=agent_key.public_key(), peer="agent", clock=hub_clock)
    agent = FrameCodec(
        signing_key=agent_key, peer_key=hub_key.public_key(), agent_id="a1", peer="hub", clock=agent_clock
    )
    return hub, agent


async def run_agent_link(
    transport: Transport,
    codec: FrameCodec,
    on_message: MessageHandler,
    *,
    task_status: trio.TaskStatus[Link] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_link(
        transport,
        codec,
        on_message,
        heartbeat_interval_s=HEARTBEAT_S,
        make_heartbeat=lambda: AgentHeartbeat(payload=HeartbeatPayload()),
        peer="the hub",
    ) as link:
        task_status.started(link)
        await link.wait_closed()


@asynccontextmanager
async def linked(
    on_agent_message: MessageHandler = ignore,
    hub_clock: SteppedClock | None = None,
    agent_clock: SteppedClock | None = None,
) -> AsyncIterator[tuple[Link, Link]]:
    """A hub link (liveness as the hub sets it) and an agent link that beats every 10 s.

    The agent link runs in a task of its own: its end does not cancel the block, the
    hub link's does (as a link's owner sees it).
    """
    hub_codec, agent_codec = codec_pair(hub_clock or SteppedClock(), agent_clock or SteppedClock())
    async with websocket_pair() as (agent_transport, hub_transport), trio.open_nursery() as nursery:
        agent_link = await nursery.start(run_agent_link, agent_transport, agent_codec, on_agent_message)
        async with open_link(
            hub_transport, hub_codec, ignore, liveness_timeout_s=LIVENESS_S, peer="agent web-1 (a1)"
        ) as hub_link:
            yield hub_link, agent_link
        with trio.fail_after(5):
            await agent_link.wait_closed()
        nursery.cancel_scope.cancel()


async def test_a_clock_step_ends_the_link_at_the_next_frame(autojump_clock: trio.abc.Clock) -> None:
    hub_clock = SteppedClock()
    start = trio.current_time()
    failures: list[tuple[float, str]] = []

    async def ask(hub_link: Link) -> None:
        with pytest.raises(AgentUnavailable) as failed:
            await hub_link.request(probe_request("pending"))
        failures.append((trio.current_time() - start, str(failed.value)))

    with trio.fail_after(60):
        async with linked(hub_clock=hub_clock) as (hub_link, agent_link), trio.open_nursery() as nursery:
            nursery.start_soon(ask, hub_link)
            await trio.sleep(STEP_AT_S)
            hub_clock.offset_s = -300  # the hub's clock steps back: the agent's is now 5 min ahead
            await trio.sleep_forever()  # until the link ends
        closed_at = trio.current_time() - start
    expected = f"the agent's clock is 300 s ahead of the hub's (window ±120 s): {CLOCK_WORDS}"
    assert closed_at == pytest.approx(2 * HEARTBEAT_S)  # the first heartbeat after the step, not a timeout
    assert hub_link.close_reason == expected
    assert hub_link.refused_frame
    assert hub_link.statistics().dropped == 1
    # the pending probe's caller hears about the clocks at once
    assert failures == [(pytest.approx(2 * HEARTBEAT_S), f"agent disconnected: {expected}")]
    # the close frame tells the agent the same, with the policy-violation code
    assert agent_link.close_reason == f"{expected} (close code {CLOSE_POLICY})"
    assert agent_link.refused_frame


async def test_the_skew_is_named_the_right_way_round(autojump_clock: trio.abc.Clock) -> None:
    hub_clock = SteppedClock(offset_s=+400)  # the hub's clock is ahead: the agent's is behind
    with trio.fail_after(60):
        async with linked(hub_clock=hub_clock) as (hub_link, _):
            await trio.sleep_forever()
    assert hub_link.close_reason.startswith("the agent's clock is 400 s behind the hub's (window ±120 s)")


async def test_a_stale_probe_request_is_answered_with_a_clock_error(autojump_clock: trio.abc.Clock) -> None:
    agent_clock = SteppedClock(offset_s=+300)  # the agent's clock is ahead: the hub's looks 300 s behind
    handled: list[Message] = []
    refusals: list[ProbeFailed] = []

    async def collect(message: Message) -> None:
        handled.append(message)

    with trio.fail_after(5):
        async with linked(collect, agent_clock=agent_clock) as (hub_link, agent_link):
            try:
                await hub_link.request(probe_request("stale"))
            except ProbeFailed as exc:
                refusals.append(exc)
            await trio.sleep_forever()  # until the agent's close ends the hub's link too
    assert not handled  # the agent never ran it
    expected = f"the hub's clock is 300 s behind the agent's (window ±120 s): {CLOCK_WORDS}"
    assert [(r.code, r.message) for r in refusals] == [("clock_skew", expected)]
    assert agent_link.close_reason == expected
    assert agent_link.refused_frame


async def test_dropped_frames_do_not_keep_a_link_alive(autojump_clock: trio.abc.Clock) -> None:
    hub_codec, _ = codec_pair(SteppedClock(), SteppedClock())
    start = trio.current_time()
    async with websocket_pair() as (agent_transport, hub_transport):
        async with open_link(hub_transport, hub_codec, ignore, liveness_timeout_s=LIVENESS_S) as hub_link:
            with trio.fail_after(60):
                while not hub_link.closed:
                    await agent_transport.send_text("{not json")  # dropped, link goes on, but not alive
                    await trio.sleep(5)
    assert trio.current_time() - start == pytest.approx(LIVENESS_S, abs=5)
    assert "silent" in hub_link.close_reason
    assert not hub_link.refused_frame


async def test_a_frame_that_does_not_parse_is_dropped_and_the_link_goes_on(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    async with linked() as (hub_link, agent_link):
        await agent_link.transport.send_text("{not json")
        await agent_link.transport.send_text('{"v":1,"type":"agent.future"}')
        await trio.sleep(3 * HEARTBEAT_S)  # past the liveness timeout: the heartbeats kept it alive
        dropped, closed = hub_link.statistics().dropped, hub_link.closed
        agent_link.close("test over")
    assert (dropped, closed) == (2, False)
    lines = [r.getMessage() for r in caplog.records if "dropped a frame" in r.getMessage()]
    assert len(lines) == 2
    assert all(line.startswith("dropped a frame from agent web-1 (a1): ") for line in lines)


async def test_a_flood_of_dropped_frames_is_logged_a_line_a_minute(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if "dropped a frame" in r.getMessage()]

    async with linked() as (hub_link, agent_link):
        for _ in range(50):
            await agent_link.transport.send_text("{not json")
        await trio.sleep(1)
        first = logged()
        await trio.sleep(DROPPED_LOG_INTERVAL_S)
        await agent_link.transport.send_text("{not json")
        await trio.sleep(1)
        dropped, closed = hub_link.statistics().dropped, hub_link.closed
        agent_link.close("test over")
    assert (dropped, closed) == (51, False)
    assert len(first) == DROPPED_LOGGED_EACH
    assert logged()[DROPPED_LOGGED_EACH:] == [
        f"dropped a frame from agent web-1 (a1): {first[0].split(': ', 1)[1]} "
        f"({50 - DROPPED_LOGGED_EACH} more dropped since the last line)"
    ]


@pytest.mark.parametrize("attack", ["foreign key", "replayed"])
async def test_a_frame_failing_its_authentication_ends_the_link(
    autojump_clock: trio.abc.Clock, attack: str
) -> None:
    with trio.fail_after(5):
        async with linked() as (hub_link, agent_link):
            if attack == "foreign key":
                stranger = FrameCodec(signing_key=new_private_key(), agent_id="a1")
                await agent_link.transport.send_text(stranger.encode(AgentHeartbeat()))
                words = "frame signature does not verify"
            else:
                frame = agent_link.codec.encode(AgentHeartbeat())
                await agent_link.transport.send_text(frame)
                await agent_link.transport.send_text(frame)
                words = "frame nonce was already used (replay)"
            await trio.sleep_forever()
    assert hub_link.close_reason == f"refused a frame from the agent: {words}"
    assert hub_link.refused_frame
    assert agent_link.close_reason == f"refused a frame from the agent: {words} (close code {CLOSE_POLICY})"


async def test_stale_heartbeats_keep_nothing_alive(autojump_clock: trio.abc.Clock) -> None:
    """The hunter's case from the agent's side: its clock steps, its heartbeats go stale."""
    hub_codec, agent_codec = codec_pair(SteppedClock(), SteppedClock())
    agent_clock = SteppedClock()
    start = trio.current_time()
    with trio.fail_after(60):
        async with websocket_pair() as (agent_transport, hub_transport):
            async with open_link(hub_transport, hub_codec, ignore, liveness_timeout_s=LIVENESS_S):
                while True:
                    if trio.current_time() - start >= STEP_AT_S:
                        agent_clock.offset_s = 300
                    beat = AgentHeartbeat(ts=agent_clock())  # stamped by the agent's clock
                    await agent_transport.send_text(agent_codec.encode(beat))
                    await trio.sleep(HEARTBEAT_S)
    assert trio.current_time() - start == pytest.approx(2 * HEARTBEAT_S)

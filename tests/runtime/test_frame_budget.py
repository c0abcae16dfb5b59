"""A peer that sends frames only to have them thrown away is cut off: each is parsed and checked
first, which every other link waits for (a hostile agent's flood of 1 MiB replies to requests
never sent took another agent's probe from 9 to 122 ms at the median). On the autojump clock."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from sonde.frame_budget import DROPPED_PER_MINUTE_MAX, LATE_REPLIES_SLACK
from sonde.protocol.messages import ProbeRequest
from sonde.transport import CLOSE_POLICY
from tests.runtime.test_link import probe_request, response_to
from tests.runtime.test_link_refusals import linked


async def test_unreadable_frames_past_the_minutes_budget_end_the_link(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with linked() as (hub_link, agent_link):
            for _ in range(DROPPED_PER_MINUTE_MAX):
                await agent_link.transport.send_text("{not json")
            await trio.sleep(1)
            assert not hub_link.closed  # the budget itself: the link goes on
            await agent_link.transport.send_text("{not json")
            await hub_link.wait_closed()
    assert hub_link.close_code == CLOSE_POLICY
    assert (
        hub_link.close_reason
        == f"dropped {DROPPED_PER_MINUTE_MAX + 1} frames within a minute: none could be read"
    )
    assert agent_link.peer_close_code == CLOSE_POLICY


async def test_unreadable_frames_within_the_budget_each_minute_never_end_the_link(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with linked() as (hub_link, agent_link):
        for _minute in range(3):
            for _ in range(DROPPED_PER_MINUTE_MAX):
                await agent_link.transport.send_text("{not json")
            await trio.sleep(61)
        dropped, closed = hub_link.statistics().dropped, hub_link.closed
        agent_link.close("test over")
    assert (dropped, closed) == (3 * DROPPED_PER_MINUTE_MAX, False)


async def test_replies_to_requests_never_sent_end_the_link(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(30):
        async with linked() as (hub_link, agent_link):
            for i in range(LATE_REPLIES_SLACK):
                await agent_link.send(response_to(probe_request(f"never-{i}")))
            await trio.sleep(1)
            assert not hub_link.closed
            await agent_link.send(response_to(probe_request("never-last")))
            await hub_link.wait_closed()
    assert hub_link.close_code == CLOSE_POLICY
    assert (
        hub_link.close_reason
        == f"{LATE_REPLIES_SLACK + 1} replies to requests not waiting for one (0 given up on)"
    )


async def test_late_replies_to_requests_given_up_on_are_taken(autojump_clock: trio.abc.Clock) -> None:
    given_up = 3 * LATE_REPLIES_SLACK
    asked: list[ProbeRequest] = []
    async with linked() as (hub_link, agent_link):
        for i in range(given_up):
            asked.append(probe_request(f"slow-{i}"))
            with trio.move_on_after(1):  # the caller's timeout: the agent answers later
                await hub_link.request(asked[-1])
        for request in asked:
            await agent_link.send(response_to(request))
        await trio.sleep(1)
        late, closed = hub_link.statistics().late, hub_link.closed
        agent_link.close("test over")
    assert (late, closed) == (given_up, False)


@pytest.mark.parametrize("extra", [LATE_REPLIES_SLACK, LATE_REPLIES_SLACK + 1])
async def test_the_slack_is_counted_above_the_requests_given_up_on(
    autojump_clock: trio.abc.Clock, extra: int
) -> None:
    async with linked() as (hub_link, agent_link):
        with trio.move_on_after(1):
            await hub_link.request(probe_request("slow"))
        await agent_link.send(response_to(probe_request("slow")))
        for i in range(extra):
            await agent_link.send(response_to(probe_request(f"never-{i}")))
        await trio.sleep(1)
        agent_link.close("test over")  # the hub's link ended first, or ends now
    assert (hub_link.close_code == CLOSE_POLICY) == (extra > LATE_REPLIES_SLACK), hub_link.close_reason

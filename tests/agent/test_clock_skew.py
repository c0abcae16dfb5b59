"""The agent when its clock and the hub's disagree, against the scripted fake hub.

Regressions: a skewed agent that was removed never learned it (it checked the reject's
timestamp before reading it, logged "clocks disagree" and retried forever); a probe
request it refused for its timestamp was dropped silently (the caller waited out its
timeout); and the re-enroll advice it gave on removal was a command that is refused.
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta
from functools import partial

import pytest
import trio

from sonde.agent.daemon import AgentDaemon
from sonde.agent.exit_codes import EXIT_REJECTED
from sonde.agent.main import agent_main
from sonde.protocol.errors import ProbeFailed
from sonde.protocol.messages import ProbeRequest, ProbeRequestPayload, utc_now
from tests.agent.fakehub import FakeHub
from tests.agent.probes import registry_for_tests
from tests.agent.test_daemon import ScriptedConnector

HUB_BEHIND = "the hub's clock is 300 s behind the agent's (window ±120 s)"
REENROLL = "sonde enroll --hub http://hub.test --name test-agent --replace"


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


async def run_agent(
    hub: FakeHub,
    connector: ScriptedConnector,
    *,
    task_status: trio.TaskStatus[AgentDaemon] = trio.TASK_STATUS_IGNORED,
) -> int:
    return await agent_main(
        hub.config("http://hub.test"),
        registry_for_tests(),
        connect=connector,
        rng=random.Random(1),
        handle_signals=False,
        task_status=task_status,
    )


async def test_a_skewed_agent_obeys_a_revoke_bound_to_its_register(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    hub = FakeHub(script=["bound-reject:revoked"], reject_clock_offset_s=-300)
    connector = ScriptedConnector(hub)
    with trio.fail_after(600):
        exit_code = await run_agent(hub, connector)
    assert exit_code == EXIT_REJECTED
    assert len(connector.calls) == 1
    rejected = [line for line in messages(caplog) if line.startswith("the hub rejected the register")]
    assert rejected == [  # the clocks are still worth fixing
        f"the hub rejected the register: scripted reject (revoked); and by the answer's timestamp, {HUB_BEHIND}"
        ": clocks disagree (is NTP running on both?)"
    ]


async def test_an_unbound_stale_reject_is_logged_not_obeyed(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """An older hub's reject echoes nothing: with the clocks apart it could be a replay."""
    hub = FakeHub(script=["reject:revoked", "ack"], reject_clock_offset_s=-300)
    connector = ScriptedConnector(hub)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(600):
            agent = await nursery.start(partial(run_agent, hub, connector))
        await agent.stop("test over")
    assert len(connector.calls) == 2  # retried, then acknowledged
    unheeded = [line for line in messages(caplog) if HUB_BEHIND in line]
    assert len(unheeded) == 1, messages(caplog)
    assert "the hub's answer was a reject (revoked: scripted reject), not heeded" in unheeded[0]


async def test_a_stale_probe_request_gets_a_clock_error_and_the_agent_reconnects(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    hub = FakeHub(heartbeat_interval_s=30)
    connector = ScriptedConnector(hub)
    stale = ProbeRequest(
        payload=ProbeRequestPayload(request_id="r1", probe="system.memory.usage"),
        ts=utc_now() - timedelta(seconds=300),  # sent by a hub whose clock just stepped back
    )
    async with trio.open_nursery() as nursery:
        agent = await nursery.start(partial(run_agent, hub, connector))
        (first,) = await hub.wait_for_links(1)
        with pytest.raises(ProbeFailed) as refused, trio.fail_after(5):
            await first.request(stale)
        await hub.wait_for_links(2)  # it went away at once and came back
        await agent.stop("test over")
    assert refused.value.code == "clock_skew"
    assert refused.value.message.startswith(HUB_BEHIND)
    assert any(
        line.startswith("disconnected from ws://hub.test/ws/agent: " + HUB_BEHIND)
        for line in messages(caplog)
    ), messages(caplog)


@pytest.mark.parametrize("code", ["revoked", "unknown_agent"])
async def test_the_reenroll_advice_is_a_command_that_works(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture, code: str
) -> None:
    """This machine is still enrolled (its config is there): `sonde enroll` needs --replace, and
    --name to keep its name rather than take the hostname."""
    hub = FakeHub(script=[f"bound-reject:{code}"])
    exit_code = await run_agent(hub, ScriptedConnector(hub))
    assert exit_code == EXIT_REJECTED
    (fatal,) = messages(caplog, logging.ERROR)
    assert f"re-enroll with `{REENROLL}`" in fatal
    assert "`sonde hub token create --name test-agent`" in fatal

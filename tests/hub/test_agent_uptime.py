"""An agent's uptime counts on with the hub's monotonic clock, whatever either wall clock says.

Before, `agent_overview.uptime_s` was the hub's wall clock less the boot time the agent said
at register, read off the agent's wall clock: an agent whose clock was 100 s off (the link
allows 120 s) was given an uptime 100 s off, and a hub clock stepped later bent it too.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from sonde.hub.agent_session import AgentSession, booted_at
from sonde.protocol.messages import AgentRegister, Attestation, RegisterPayload

ATTESTATION = Attestation(os="linux", kernel="6.1", agent_version="0.1.0", code_hash="sha256:x", packs={})


def register(sent: float, boot_time: float | None) -> AgentRegister:
    """A register sent at ``sent`` by the agent's wall clock, of a machine it says booted at ``boot_time``."""
    payload = RegisterPayload(
        name="web-1",
        hostname="web-1",
        os="linux",
        agent_version="0.1.0",
        boot_time=boot_time,
        packs=(),
        attestation=ATTESTATION,
    )
    return AgentRegister(payload=payload, ts=dt.datetime.fromtimestamp(sent, dt.UTC))


def session(message: AgentRegister) -> AgentSession:
    link: Any = None  # never used: only the register and the times are read
    return AgentSession(agent_id="a-1", link=link, register=message.payload, booted_mono=booted_at(message))


@pytest.mark.parametrize("agent_clock_off_s", [0.0, 100.0, -100.0, 86400.0])
def test_the_uptime_is_the_same_however_far_the_agents_clock_is_off(agent_clock_off_s: float) -> None:
    agent_now = time.time() + agent_clock_off_s
    connected = session(register(agent_now, boot_time=agent_now - 1000))
    assert connected.uptime_s() == pytest.approx(1000, abs=0.5)


def test_the_uptime_counts_on_with_the_hubs_monotonic_clock() -> None:
    connected = session(register(time.time(), boot_time=time.time() - 1000))
    assert connected.booted_mono is not None
    connected.booted_mono -= 50  # as if it registered 50 s ago
    assert connected.uptime_s() == pytest.approx(1050, abs=0.5)


def test_an_agent_that_says_no_boot_time_has_no_uptime() -> None:
    assert session(register(time.time(), boot_time=None)).uptime_s() is None

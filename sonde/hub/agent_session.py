"""One connected agent (`AgentSession`): its link, what it said at register, and when its
machine booted on the hub's clock (`booted_at`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import trio

from sonde.hub.fan_out_places import FAN_OUT_PER_AGENT
from sonde.hub.turns import Turns
from sonde.protocol.messages import AgentRegister, RegisterPayload
from sonde.runtime import Link
from sonde.transport import CLOSE_NORMAL


@dataclass
class AgentSession:
    """One connected agent: its link and what it said at register."""

    agent_id: str
    link: Link
    register: RegisterPayload  # without its packs: those are in ``packs``, shared with other agents'
    packs: list[Any] = field(default_factory=list)  # the packs it described (`shared_packs`)
    connected_at: float = field(default_factory=time.time)
    # when the agent's machine booted, on the hub's monotonic clock (`booted_at`); None: it did not say
    booted_mono: float | None = None
    peer: str = "?"  # the address it connected from
    last_seen: float = field(default_factory=time.time)
    probes_in_flight: int = 0
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    # a fan-out's probes (runbook steps) on this agent's link at once: `Fleet.run_probe`
    fan_out_places: Turns = field(default_factory=lambda: Turns(FAN_OUT_PER_AGENT))

    def uptime_s(self) -> float | None:
        """The agent machine's uptime now, on the hub's monotonic clock."""
        return None if self.booted_mono is None else time.monotonic() - self.booted_mono

    def end(self, reason: str, code: int = CLOSE_NORMAL) -> None:
        """Close the connection from the hub's side, saying why to the agent and in the log."""
        self.link.close(reason, code)
        self.cancel_scope.cancel()


def booted_at(register: AgentRegister) -> float | None:
    """When the agent's machine booted, on this hub's monotonic clock.

    The register's timestamp less the boot time it carries is the machine's uptime then
    (both read off the agent's wall clock at once), so however far that clock is off, or was
    stepped before, it cancels out; from there the hub's monotonic clock counts on, which no
    step of either wall clock bends.
    """
    boot = register.payload.boot_time
    return None if boot is None else time.monotonic() - (register.ts.timestamp() - boot)

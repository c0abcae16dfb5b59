"""Where a fan-out's probes wait their turn: places on each agent, and in the hub.

A fan-out's probes (`health_check`'s and `diagnose`'s runbook steps) wait for one of their
agent's `FAN_OUT_PER_AGENT` places and one of the hub's `FAN_OUT_PER_HUB` before they enter the
agent's link, API keys in turns (`Turns`); a single probe call does not wait. The link's writer
is first in, first out: with 50 health_checks over 200 agents, each agent's queue filled to its
cap, and one probe call waited ~9 s behind them (the hub's loop saturated by 12,800 probe
tasks), or was refused.

A probe holds its hub place until it ends or, slow (`SLOW_STEP_S` in flight), gives it back
(`HubPlaces.give_back_slow`) and keeps its agent's. Held until its caller's deadline, as at
first, the places of 128 agents that hang (8 each) stalled every fan-out, on healthy agents too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from sonde.hub.executor_limits import SLOW_STEP_S
from sonde.hub.turns import Place, Turns

FAN_OUT_PER_AGENT = 8
FAN_OUT_PER_HUB = 1024


class HubPlaces:
    """The hub's fan-out places, and when each held one was taken."""

    def __init__(self, places: int = FAN_OUT_PER_HUB) -> None:
        self.turns = Turns(places)
        self._held: dict[Place, float] = {}  # since when, the oldest first

    @asynccontextmanager
    async def place(self, whose: str) -> AsyncIterator[None]:
        """Hold a place for the block, at ``whose`` turn, unless it is given back as slow first."""
        async with self.turns.place(whose) as place:
            self._held[place] = trio.current_time()
            try:
                yield
            finally:
                self._held.pop(place, None)

    def give_back_slow(self) -> None:
        """Give back the places held `SLOW_STEP_S` and more. Called by each fan-out as it watches
        its steps (`run_pool`): every place held is a running fan-out's."""
        cutoff = trio.current_time() - SLOW_STEP_S
        while self._held:
            place, since = next(iter(self._held.items()))
            if since > cutoff:
                return
            del self._held[place]
            place.give_back()

"""Places taken in turns: at most so many holders, and those waiting served by whose they are.

A fan-out's probes (`Fleet.run_probe`) wait for a place on their agent and one in the hub. In
arrival order alone, one API key's fifty `health_check`s queued thousands of probes, and another
key's single `health_check` waited behind all of them. Here each key waiting has its turn in
rotation, and its own waiters keep their order: two keys share the places evenly, whatever
either has queued.

A waiter cancelled before its turn is skipped when the turn comes; one cancelled once its place
was handed to it holds it until its next checkpoint, and gives it back as it leaves the block.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio


@dataclass(eq=False)
class _Ticket:
    handed: trio.Event = field(default_factory=trio.Event)
    gone: bool = False  # cancelled while waiting: skipped


class Turns:
    """``places`` places; `place` takes one, in turns by whose the taker is."""

    def __init__(self, places: int) -> None:
        self._free = places  # more than 0 only when no one waits
        self._waiting: dict[str, deque[_Ticket]] = {}
        self._order: deque[str] = deque()  # the keys waiting, the next turn's first

    @property
    def waiting(self) -> int:
        """How many wait (those cancelled but not yet skipped included)."""
        return sum(len(queue) for queue in self._waiting.values())

    @asynccontextmanager
    async def place(self, whose: str) -> AsyncIterator[None]:
        """Hold a place for the block: at once when one is free, else at ``whose`` turn."""
        await self._take(whose)
        try:
            yield
        finally:
            self._hand_on()

    async def _take(self, whose: str) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free > 0:
            self._free -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        ticket = _Ticket()
        queue = self._waiting.get(whose)
        if queue is None:
            queue = self._waiting[whose] = deque()
            self._order.append(whose)
        queue.append(ticket)
        try:
            await ticket.handed.wait()
        except BaseException:
            if ticket.handed.is_set():  # trio does not cancel a wait once woken; were it to, not lost
                self._hand_on()
            else:
                ticket.gone = True
            raise

    def _hand_on(self) -> None:
        """A place given back: to the next key's first waiter, or free."""
        while self._order:
            whose = self._order.popleft()
            queue = self._waiting[whose]
            ticket = None
            while queue and ticket is None:
                candidate = queue.popleft()
                ticket = None if candidate.gone else candidate
            while queue and queue[0].gone:
                queue.popleft()
            if queue:
                self._order.append(whose)  # its next waiter, after the other keys'
            else:
                del self._waiting[whose]
            if ticket is not None:
                ticket.handed.set()
                return
        self._free += 1

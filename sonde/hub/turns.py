"""Places taken in turns: at most so many holders, and those waiting served by whose they are.

A fan-out's probes (`Fleet.run_probe`) wait for a place on their agent and one in the hub. In
arrival order alone, one API key's fifty `health_check`s queued thousands of probes, and another
key's single `health_check` waited behind all of them. Here each key waiting has its turn in
rotation, and its own waiters keep their order: two keys share the places evenly, whatever
either has queued.

A holder may give its place back before it leaves the block (`Place.give_back`): a fan-out's
probe that has waited long for its agent keeps its agent's place but gives back the hub's.

A waiter cancelled before its turn leaves its key's line at once (its key's turn too, when it
was the last); one cancelled once its place was handed to it holds it until its next
checkpoint, and gives it back as it leaves the block. Lines are insertion-ordered dicts, so
both are O(1). (Marked and left for their turn to skip, as at first, the cancelled waiters of a
key looping short `health_check`s piled up until a place came back, up to a probe's 31 s, and
that one hand-over cleared them all at once: 1.3 s for two million.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio


@dataclass(eq=False)
class _Ticket:
    handed: trio.Event = field(default_factory=trio.Event)


class Place:
    """A place held; given back once, early (`give_back`) or as its block ends."""

    def __init__(self, turns: Turns) -> None:
        self._turns: Turns | None = turns

    @property
    def held(self) -> bool:
        return self._turns is not None

    def give_back(self) -> None:
        """Give the place back now (to the next in turn); the block's end then gives back nothing."""
        turns, self._turns = self._turns, None
        if turns is not None:
            turns._hand_on()


class Turns:
    """``places`` places; `place` takes one, in turns by whose the taker is."""

    def __init__(self, places: int) -> None:
        self._free = places  # more than 0 only when no one waits
        # the keys waiting, the next turn's first, each with its waiters, the first first
        self._waiting: dict[str, dict[_Ticket, None]] = {}

    @property
    def free(self) -> int:
        """How many places are free now (none while any wait)."""
        return self._free

    @property
    def waiting(self) -> int:
        """How many wait."""
        return sum(len(line) for line in self._waiting.values())

    @asynccontextmanager
    async def place(self, whose: str) -> AsyncIterator[Place]:
        """Hold a place for the block: at once when one is free, else at ``whose`` turn."""
        await self._take(whose)
        place = Place(self)
        try:
            yield place
        finally:
            place.give_back()

    async def _take(self, whose: str) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._free > 0:
            self._free -= 1
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        ticket = _Ticket()
        line = self._waiting.setdefault(whose, {})
        line[ticket] = None
        try:
            await ticket.handed.wait()
        except BaseException:
            if ticket.handed.is_set():  # trio does not cancel a wait once woken; were it to, not lost
                self._hand_on()
            else:
                del line[ticket]  # still in the line: its key's, there as long as it is not empty
                if not line:
                    del self._waiting[whose]
            raise

    def _hand_on(self) -> None:
        """A place given back: to the first waiter of the key whose turn it is, or free."""
        if not self._waiting:
            self._free += 1
            return
        whose = next(iter(self._waiting))
        line = self._waiting.pop(whose)
        ticket = next(iter(line))
        del line[ticket]
        if line:
            self._waiting[whose] = line  # its next waiter, after the other keys'
        ticket.handed.set()

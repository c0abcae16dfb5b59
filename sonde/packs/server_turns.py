"""Turns at a server: at most `TURNS_PER_SERVER` probes of one pack talk to one server at once.

``health_check`` and ``diagnose`` send a runbook's steps to the agent together, and every
probe of the database packs (postgres, mysql, redis) opens connections of its own: six at
once on one PostgreSQL server for its runbook. On a server with a slot or two left that
turned its applications away, and then Sonde's own probes read the server as full. So each
probe of those packs takes a *turn* at its server before it starts and gives it back when
it ends (`takes_turns`, on its entry point); the rest wait in order of arrival
(`trio.CapacityLimiter` is fair). An agent process keeps the turns of every server
(`ServerTurns`, in `ProbeContext.server_turns`).

A turn is per probe, not per connection: taken once, around the whole probe, so the
connections a probe opens inside it never wait for a turn, one after another or a second
beside the first, and cannot deadlock against each other. The packs' probes hold one
connection at a time, so a server sees at most `TURNS_PER_SERVER` of one agent's
connections at once.

The server is the pack and where it listens (`ServerKey`: host and port, or its socket),
never the user or database: connection slots are the server's (``max_connections``,
``maxclients``), and a probe naming another database must not get turns of its own. Two
spellings of one server (``localhost`` and ``127.0.0.1``, its socket and its port) are two
servers here.

A probe waits within its own deadline. One that gets no turn before it ends as a timed-out
probe does (the executor's ``timeout`` code), saying it waited for the server's other Sonde
probes (`NoTurnBeforeDeadline`). Cancelled, waiting or running, it gives its turn back at
once; a server a probe no longer waits on or holds a turn at is forgotten, so the turns
kept cost memory for the servers in use only.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

import trio

from sonde.packs.base import OutOfTime
from sonde.packs.services import Endpoint, ServiceDefaults, ServiceParams, endpoint

if TYPE_CHECKING:
    from sonde.packs.context import ProbeContext

TURNS_PER_SERVER = 2  # probes of one pack talking to one server at once, per agent process
# A waiting probe gives up this long before its deadline: at the deadline itself the executor's
# own timeout would end it, saying only that it did not finish
GIVE_UP_BEFORE_DEADLINE_S = 0.05

P = TypeVar("P", bound=ServiceParams)
R = TypeVar("R")


@dataclass(frozen=True)
class ServerKey:
    """One server as turns count it: the pack talking to it and where it listens."""

    pack: str
    address: str  # "host:port" ("[::1]:5432"), or the socket's path

    def __str__(self) -> str:
        return f"the {self.pack} server at {self.address}"


class NoTurnBeforeDeadline(OutOfTime):
    """A probe's deadline came while Sonde's other probes held every turn at its server: it
    ends as a timed-out probe does (code ``timeout``), saying why."""


class _Turn:
    """Who borrows a turn: one probe run (trio's default, the task, would forbid a second)."""


class ServerTurns:
    """The turns at every server one agent process talks to: ``per_server`` at each."""

    def __init__(self, per_server: int = TURNS_PER_SERVER) -> None:
        self.per_server = per_server
        self._limiters: dict[ServerKey, trio.CapacityLimiter] = {}

    @property
    def servers(self) -> set[ServerKey]:
        """The servers a probe holds or waits for a turn at now (the others are forgotten)."""
        return set(self._limiters)

    def holders(self, server: ServerKey) -> int:
        """How many probes hold a turn at ``server`` now."""
        limiter = self._limiters.get(server)
        return 0 if limiter is None else limiter.borrowed_tokens

    def waiting(self, server: ServerKey) -> int:
        """How many probes wait for a turn at ``server`` now."""
        limiter = self._limiters.get(server)
        return 0 if limiter is None else limiter.statistics().tasks_waiting

    @asynccontextmanager
    async def turn(self, server: ServerKey) -> AsyncIterator[None]:
        """Hold a turn at ``server`` for the block, waiting for one within the task's deadline.

        Raises `NoTurnBeforeDeadline` when the deadline comes first. Cancellation while
        waiting or in the block gives the turn back.
        """
        limiter = self._limiters.get(server)
        if limiter is None:
            limiter = self._limiters[server] = trio.CapacityLimiter(self.per_server)
        turn = _Turn()
        try:
            await self._wait(server, limiter, turn)
            try:
                yield
            finally:
                limiter.release_on_behalf_of(turn)
        finally:
            if limiter.borrowed_tokens == 0 and limiter.statistics().tasks_waiting == 0:
                self._limiters.pop(server, None)

    async def _wait(self, server: ServerKey, limiter: trio.CapacityLimiter, turn: _Turn) -> None:
        try:
            limiter.acquire_on_behalf_of_nowait(turn)  # a free turn is taken, however near the deadline
            return
        except trio.WouldBlock:
            pass
        started = trio.current_time()
        with trio.move_on_at(trio.current_effective_deadline() - GIVE_UP_BEFORE_DEADLINE_S) as waiting:
            await limiter.acquire_on_behalf_of(turn)
        if waiting.cancelled_caught:
            raise NoTurnBeforeDeadline(self._gave_up(server, round(trio.current_time() - started, 2)))

    def _gave_up(self, server: ServerKey, waited_s: float) -> str:
        others = self.waiting(server)
        queue = f", and {others} more wait{'s' if others == 1 else ''}" if others else ""
        return (
            f"the probe waited {waited_s:g}s for a turn at {server} and got none before its deadline: "
            f"Sonde's other probes of that server held all {self.per_server} turns{queue} (Sonde lets at "
            f"most {self.per_server} probes talk to one server at once, so that it never takes more of its "
            "connections). Run it again when they are done, or with a longer timeout"
        )


Probe = Callable[["ProbeContext", P], Awaitable[R]]


def takes_turns(
    pack: str, defaults: ServiceDefaults, address: Callable[[Endpoint], str] = Endpoint.where
) -> Callable[[Probe[P, R]], Probe[P, R]]:
    """A decorator for the entry points of ``pack``'s probes (under ``@PACK.probe``): each runs
    with a turn held at its server, taken once for the whole run (`ServerTurns.turn`).

    The server is ``address`` of the probe's endpoint (the pack's agent config, then
    ``defaults``, as its connections find it). The probe's ``ctx`` names the turn held
    (`ProbeContext.turns_held`): a probe function called inside it for the same server runs
    on that turn rather than waiting for a second one.
    """

    def server_of(ctx: ProbeContext, params: ServiceParams) -> ServerKey:
        return ServerKey(pack, address(endpoint(params, ctx.settings.for_pack(pack), defaults)))

    def decorate(probe: Probe[P, R]) -> Probe[P, R]:
        @functools.wraps(probe)
        async def with_a_turn(ctx: ProbeContext, params: P) -> R:
            server = server_of(ctx, params)
            if server in ctx.turns_held:
                return await probe(ctx, params)
            async with ctx.server_turns.turn(server):
                return await probe(replace(ctx, turns_held=ctx.turns_held | {server}), params)

        return with_a_turn

    return decorate

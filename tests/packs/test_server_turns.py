"""Turns at a server: at most two probes of a pack talk to one server at once, per agent.

On trio's autojump clock with a pack of the test's own whose probes hold their turn until
the test lets them finish (`Gate`): no server is needed, and times are exact. Then every
probe of the postgres, mysql and redis packs is shown to wait for its turn before it
connects, and `Hangup.hang_up` to wait for the server's end of the connection.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing
from pydantic import Field

from sonde.packs.base import Pack, Result
from sonde.packs.context import THREAD_LIMIT, ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.mysql import PACK as MYSQL
from sonde.packs.postgres import PACK as POSTGRES
from sonde.packs.redis import PACK as REDIS
from sonde.packs.registry import PackRegistry
from sonde.packs.server_turns import GIVE_UP_BEFORE_DEADLINE_S, TURNS_PER_SERVER, ServerKey, takes_turns
from sonde.packs.services import Hangup, ServiceDefaults, ServiceParams
from tests.packs.test_stuck_threads import never_answer_a_query, serve_hung

TURN_PACK = Pack("turnpack", "0.0.1", "probes that hold their turn at a server until let go")
DEFAULTS = ServiceDefaults("127.0.0.1", 7000)
one_turn = takes_turns("turnpack", DEFAULTS)
SERVER = ServerKey("turnpack", "127.0.0.1:7000")
OTHER_SERVER = ServerKey("turnpack", "127.0.0.1:7001")
PROBE_TIMEOUT_S = 30


@dataclass
class Gate:
    """Which probes run (hold their turn) now, and the events that let each finish."""

    running: set[str] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    finish: defaultdict[str, trio.Event] = field(default_factory=lambda: defaultdict(trio.Event))


class HoldParams(ServiceParams):
    tag: str = Field(pattern=r"^[a-z0-9]{1,10}$")


class Held(Result):
    tag: str


def gate_of(ctx: ProbeContext) -> Gate:
    gate = ctx.settings.for_pack("turnpack")["gate"]
    assert isinstance(gate, Gate)
    return gate


@TURN_PACK.probe(
    "turnpack.turn.hold", "Holds its turn until the test lets it finish.", timeout_s=PROBE_TIMEOUT_S
)
@one_turn
async def hold(ctx: ProbeContext, params: HoldParams) -> Held:
    gate = gate_of(ctx)
    gate.running.add(params.tag)
    gate.started.append(params.tag)
    try:
        await gate.finish[params.tag].wait()
    finally:
        gate.running.discard(params.tag)
    return Held(tag=params.tag)


@TURN_PACK.probe(
    "turnpack.turn.nested", "Runs `hold` inside itself, on its own turn.", timeout_s=PROBE_TIMEOUT_S
)
@one_turn
async def nested(ctx: ProbeContext, params: HoldParams) -> Held:
    return await hold(ctx, params)


REGISTRY = PackRegistry.of([TURN_PACK])


def context(**settings: Any) -> tuple[ProbeContext, Gate]:
    gate = Gate()
    return ProbeContext(ProbeSettings(packs={"turnpack": {"gate": gate, **settings}})), gate


async def run(ctx: ProbeContext, tag: str, port: int = 7000, **options: Any) -> dict[str, Any]:
    name = options.pop("name", "turnpack.turn.hold")
    return (await execute_probe(REGISTRY, name, {"tag": tag, "port": port}, ctx, **options)).result


async def test_two_servers_do_not_wait_on_each_other(autojump_clock: trio.abc.Clock) -> None:
    ctx, gate = context()
    async with trio.open_nursery() as nursery:
        for tag, port in (("a", 7000), ("b", 7000), ("c", 7001), ("d", 7001)):
            nursery.start_soon(run, ctx, tag, port)
        await trio.testing.wait_all_tasks_blocked()
        assert gate.running == {"a", "b", "c", "d"}
        assert (ctx.server_turns.holders(SERVER), ctx.server_turns.holders(OTHER_SERVER)) == (2, 2)
        for tag in "abcd":
            gate.finish[tag].set()
    assert ctx.server_turns.servers == set()  # none in use: forgotten


async def test_a_third_probe_waits_until_one_of_the_first_two_finishes(
    autojump_clock: trio.abc.Clock,
) -> None:
    ctx, gate = context()
    async with trio.open_nursery() as nursery:
        for tag in "abc":
            nursery.start_soon(run, ctx, tag)
            await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(10)
        assert (gate.running, ctx.server_turns.waiting(SERVER)) == ({"a", "b"}, 1)
        gate.finish["b"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gate.running == {"a", "c"}
        assert gate.started == ["a", "b", "c"]
        assert trio.current_time() == 10  # c started when b ended, not before
        gate.finish["a"].set()
        gate.finish["c"].set()


async def test_a_probe_that_gets_no_turn_by_its_deadline_times_out_saying_why(
    autojump_clock: trio.abc.Clock,
) -> None:
    ctx, gate = context()
    async with trio.open_nursery() as nursery:
        for tag in "abc":
            nursery.start_soon(run, ctx, tag)
        await trio.testing.wait_all_tasks_blocked()
        holding = set(gate.running)
        assert len(holding) == TURNS_PER_SERVER
        started = trio.current_time()
        with pytest.raises(ProbeExecutionError) as caught:
            await run(ctx, "late", timeout_s=4)
        assert trio.current_time() - started == pytest.approx(4 - GIVE_UP_BEFORE_DEADLINE_S)
        assert caught.value.code == "timeout"  # as a probe past its deadline ends
        assert caught.value.message == (
            "probe turnpack.turn.hold did not finish within 4s: "
            f"the probe waited {4 - GIVE_UP_BEFORE_DEADLINE_S:g}s for a turn at the turnpack server at "
            "127.0.0.1:7000 and got none before its deadline: Sonde's other probes of that server held all "
            f"{TURNS_PER_SERVER} turns, and 1 more waits (Sonde lets at most {TURNS_PER_SERVER} probes talk to "
            "one server at once, so that it never takes more of its connections). Run it again when they "
            "are done, or with a longer timeout"
        )
        assert "late" not in gate.started
        assert (gate.running, ctx.server_turns.waiting(SERVER)) == (holding, 1)  # the others go on
        for tag in "abc":
            gate.finish[tag].set()


async def test_cancellation_gives_the_turn_back(autojump_clock: trio.abc.Clock) -> None:
    ctx, gate = context()
    async with trio.open_nursery() as nursery:
        holder, waiter = trio.CancelScope(), trio.CancelScope()

        async def run_in(scope: trio.CancelScope, tag: str) -> None:
            with scope:
                await run(ctx, tag)

        nursery.start_soon(run_in, holder, "a")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(run, ctx, "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(run_in, waiter, "c")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(run, ctx, "d")
        await trio.testing.wait_all_tasks_blocked()
        assert ctx.server_turns.waiting(SERVER) == 2
        waiter.cancel()  # cancelled while waiting: it leaves the queue, and takes no turn
        await trio.testing.wait_all_tasks_blocked()
        assert (gate.running, ctx.server_turns.waiting(SERVER)) == ({"a", "b"}, 1)
        holder.cancel()  # cancelled while holding its turn: d gets it
        await trio.testing.wait_all_tasks_blocked()
        assert gate.running == {"b", "d"}
        assert ctx.server_turns.holders(SERVER) == 2
        gate.finish["b"].set()
        gate.finish["d"].set()
    assert gate.started == ["a", "b", "d"]
    assert ctx.server_turns.servers == set()


async def test_a_probe_function_called_inside_another_runs_on_its_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Two probes hold both turns, and each runs another probe function inside itself: asking
    # for a third turn there would wait for their own to end, until their deadline.
    ctx, gate = context()
    async with trio.open_nursery() as nursery:
        for tag in "ab":
            nursery.start_soon(lambda tag=tag: run(ctx, tag, name="turnpack.turn.nested"))
        await trio.testing.wait_all_tasks_blocked()
        assert (gate.running, ctx.server_turns.holders(SERVER)) == ({"a", "b"}, 2)
        gate.finish["a"].set()
        gate.finish["b"].set()
    assert trio.current_time() == 0


async def test_a_free_turn_is_taken_however_near_the_deadline(autojump_clock: trio.abc.Clock) -> None:
    ctx, _ = context()
    with trio.move_on_after(GIVE_UP_BEFORE_DEADLINE_S / 2):
        async with ctx.server_turns.turn(SERVER):
            assert ctx.server_turns.holders(SERVER) == 1
    assert ctx.server_turns.servers == set()


DATABASE_PACKS = (POSTGRES, MYSQL, REDIS)
NOTHING_LISTENS = 1  # a port no server of the tests' listens on: a probe that connected would fail


@pytest.mark.parametrize(
    "name", [name for pack in DATABASE_PACKS for name in pack.probes], ids=lambda name: str(name)
)
async def test_every_database_probe_waits_for_its_turn(autojump_clock: trio.abc.Clock, name: str) -> None:
    pack = name.split(".", 1)[0]
    ctx = ProbeContext(ProbeSettings(packs={pack: {"port": NOTHING_LISTENS}}))
    server = ServerKey(pack, f"127.0.0.1:{NOTHING_LISTENS}")
    registry = PackRegistry.of(DATABASE_PACKS)
    async with trio.open_nursery() as nursery:
        for _ in range(TURNS_PER_SERVER):
            nursery.start_soon(hold_turn, ctx, server)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ProbeExecutionError) as caught:
            await execute_probe(registry, name, {}, ctx, timeout_s=2)
        assert (caught.value.code, caught.value.message.split(" for a turn")[0]) == (
            "timeout",
            f"probe {name} did not finish within 2s: the probe waited {2 - GIVE_UP_BEFORE_DEADLINE_S:g}s",
        )
        nursery.cancel_scope.cancel()


async def hold_turn(ctx: ProbeContext, server: ServerKey) -> None:
    async with ctx.server_turns.turn(server):
        await trio.sleep_forever()


async def test_a_hung_server_takes_two_probe_threads_at_most(nursery: trio.Nursery) -> None:
    # Before, as many probes as there are threads, all at one server that never answers,
    # each took a thread (and a connection) until its deadline. Real time: real sockets.
    ctx = ProbeContext()
    server = await serve_hung(nursery, never_answer_a_query)  # pytest-trio's nursery: ends with the test
    registry = PackRegistry.of(DATABASE_PACKS)
    ended: list[str] = []

    async def hangs() -> None:
        params = {"host": "127.0.0.1", "port": server.port}
        with pytest.raises(ProbeExecutionError) as caught:
            await execute_probe(registry, "postgres.cache.hit_ratio", params, ctx, timeout_s=0.5)
        assert caught.value.code == "timeout"
        ended.append("waited for a turn" if "for a turn" in caught.value.message else "hung")

    async with trio.open_nursery() as probes:
        for _ in range(THREAD_LIMIT):
            probes.start_soon(hangs)
    assert sorted(ended) == ["hung"] * TURNS_PER_SERVER + ["waited for a turn"] * (
        THREAD_LIMIT - TURNS_PER_SERVER
    )
    assert server.accepted == TURNS_PER_SERVER


# Hangup.hang_up: the turn passes on once the server has let the connection go


async def test_hang_up_waits_for_the_server_to_close_its_side(autojump_clock: trio.abc.Clock) -> None:
    ours, servers = socket.socketpair()
    hangup = Hangup()
    hangup.attach(ours.fileno())
    ours.close()  # the client closed its descriptor after its goodbye; the hangup keeps its own
    async with trio.open_nursery() as nursery:

        async def server_goes_away() -> None:
            await trio.sleep(0.3)  # a backend exiting
            servers.close()

        nursery.start_soon(server_goes_away)
        await hangup.hang_up(wait_s=5)
        assert trio.current_time() == pytest.approx(0.3)
    assert hangup.is_cut


async def test_hang_up_gives_up_on_a_server_that_keeps_the_connection(autojump_clock: trio.abc.Clock) -> None:
    ours, servers = socket.socketpair()
    with servers:
        hangup = Hangup()
        hangup.attach(ours.fileno())
        ours.close()
        await hangup.hang_up(wait_s=1)
        assert (trio.current_time(), hangup.is_cut) == (1, True)
        assert servers.recv(1) == b""  # cut: the server sees the end of the connection


async def test_hang_up_cancelled_cuts_at_once(autojump_clock: trio.abc.Clock) -> None:
    ours, servers = socket.socketpair()
    with servers:
        hangup = Hangup()
        hangup.attach(ours.fileno())
        ours.close()
        with trio.move_on_after(0.1):
            await hangup.hang_up(wait_s=5)
        assert (trio.current_time(), hangup.is_cut) == (pytest.approx(0.1), True)
        assert servers.recv(1) == b""

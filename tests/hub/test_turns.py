"""`Turns`: a bounded number of holders; those waiting served in rotation by key, each key's in order."""

from __future__ import annotations

import trio
import trio.lowlevel
import trio.testing

from sonde.hub.turns import Turns


class Holders:
    """Tasks that each take a place and hold it until let go; the order places were taken in."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns
        self.taken: list[str] = []
        self.holding = 0
        self.most = 0
        self.go = trio.Event()

    async def hold(self, name: str, whose: str) -> None:
        async with self.turns.place(whose):
            self.taken.append(name)
            self.holding += 1
            self.most = max(self.most, self.holding)
            await self.go.wait()
            await trio.lowlevel.checkpoint()  # each lets the next one in before it finishes
            self.holding -= 1


async def test_keys_take_turns_and_each_keeps_its_order() -> None:
    turns = Turns(1)  # one place: each hand-over is the next in line's, one at a time
    holders = Holders(turns)
    async with trio.open_nursery() as nursery:
        for n in range(6):  # key a: the first holds, five wait
            nursery.start_soon(holders.hold, f"a{n}", "a")
            await trio.testing.wait_all_tasks_blocked()
        for n in range(2):  # key b comes later, with two
            nursery.start_soon(holders.hold, f"b{n}", "b")
            await trio.testing.wait_all_tasks_blocked()
        assert holders.taken == ["a0"]
        assert turns.waiting == 7
        holders.go.set()
    # arrival order alone: a1 a2 a3 a4 a5 b0 b1; in turns, b's two come between a's
    assert holders.taken == ["a0", "a1", "b0", "a2", "b1", "a3", "a4", "a5"]
    assert holders.most == 1
    assert turns.waiting == 0


async def test_a_waiter_cancelled_is_skipped_and_no_place_is_lost() -> None:
    turns = Turns(1)
    holders = Holders(turns)
    gave_up = trio.CancelScope()

    async def cancelled_waiter() -> None:
        with gave_up:
            await holders.hold("c0", "c")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holders.hold, "a0", "a")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(holders.hold, "b0", "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(cancelled_waiter)
        await trio.testing.wait_all_tasks_blocked()
        gave_up.cancel()
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(holders.hold, "c1", "c")
        await trio.testing.wait_all_tasks_blocked()
        holders.go.set()
    assert holders.taken == ["a0", "b0", "c1"]
    # all given back: the one place is free again, taken at once
    with trio.fail_after(1):
        async with turns.place("d"):
            pass
    assert turns.waiting == 0


async def test_a_waiter_cancelled_as_it_is_handed_a_place_gives_it_on() -> None:
    turns = Turns(1)
    taken: list[str] = []
    release = trio.Event()

    handed_on = trio.Event()

    async def first() -> None:
        async with turns.place("a"):
            taken.append("a")
            await release.wait()
        handed_on.set()

    async def second(scope: trio.CancelScope) -> None:
        with scope:
            async with turns.place("b"):
                taken.append("b")  # handed the place before the cancel: it runs to its next checkpoint
                await trio.sleep_forever()

    async def third() -> None:
        async with turns.place("c"):
            taken.append("c")

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(second, scope)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        await handed_on.wait()  # first gave its place back: handed to b, which may not have run yet
        scope.cancel()
    assert taken == ["a", "b", "c"]  # the place b gave up went on to c
    with trio.fail_after(1):
        async with turns.place("d"):
            pass


async def test_never_more_holders_than_places_under_churn() -> None:
    turns = Turns(3)
    holding = 0
    most = 0

    async def one(n: int) -> None:
        nonlocal holding, most
        with trio.move_on_after(0.01 * (n % 7)):  # some give up waiting, some while holding
            async with turns.place(f"k{n % 4}"):
                holding += 1
                most = max(most, holding)
                try:
                    await trio.sleep(0.003 * (n % 5))
                finally:
                    holding -= 1

    async with trio.open_nursery() as nursery:
        for n in range(300):
            nursery.start_soon(one, n)
    assert most == 3
    assert holding == 0
    assert turns.waiting == 0
    for _ in range(3):  # every place came back
        with trio.fail_after(1):
            async with turns.place("x"):
                pass


async def test_waiters_cancelled_while_every_place_is_held_leave_nothing_behind() -> None:
    """Regression: cancelled waiters were marked and left for their turn to skip, so while places
    were held (a probe's 31 s) a key looping short health_checks piled up millions of them."""
    turns = Turns(1)
    holders = Holders(turns)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(holders.hold, "a0", "a")
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            deadlines = [trio.CancelScope() for _ in range(100)]
            for n, deadline in enumerate(deadlines):
                nursery.start_soon(cancelled_while_waiting, turns, f"k{n % 3}", deadline)
            await trio.testing.wait_all_tasks_blocked()
            assert turns.waiting == 100
            for deadline in deadlines:
                deadline.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert turns.waiting == 0  # gone at once, not at the next hand-over
            assert turns._waiting == {}
        holders.go.set()
    assert holders.taken == ["a0"]


async def cancelled_while_waiting(turns: Turns, whose: str, deadline: trio.CancelScope) -> None:
    with deadline:
        async with turns.place(whose):
            raise AssertionError("no place was given back")


async def test_a_place_given_back_early_goes_on_once() -> None:
    turns = Turns(1)
    order: list[str] = []
    early = trio.Event()
    finish = trio.Event()

    async def first() -> None:
        async with turns.place("a") as place:
            order.append("first")
            await early.wait()
            place.give_back()  # its block goes on without the place
            assert not place.held
            await finish.wait()
        order.append("first out")

    async def other(name: str) -> None:
        async with turns.place("b"):
            order.append(name)
            await finish.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(other, "second")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(other, "third")
        await trio.testing.wait_all_tasks_blocked()
        early.set()
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["first", "second"]  # one place still: the third waits
        assert turns.waiting == 1
        finish.set()
    # the first's block ending gave nothing back twice: the third had the second's place
    assert [name for name in order if name != "first out"] == ["first", "second", "third"]
    assert turns.waiting == 0
    async with turns.place("c"):  # exactly one place left over
        assert turns._free == 0
    assert turns._free == 1

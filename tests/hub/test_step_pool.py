"""`run_pool`: a fan-out's steps by a bounded pool, where a step that hangs does not keep its worker,
and `HubPlaces`: the hub's fan-out places, given back by probes that are slow."""

from __future__ import annotations

import trio
import trio.testing

from sonde.hub.executor_limits import SLOW_STEP_S
from sonde.hub.fan_out_places import HubPlaces
from sonde.hub.step_pool import run_pool


class Steps:
    """Jobs named ``hang-N`` wait until let go; others end at once. What ran, and how many at once."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.started: list[str] = []
        self.running = 0
        self.most = 0
        self.release = trio.Event()

    async def run(self, job: str) -> None:
        self.started.append(job)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if job.startswith("hang"):
                await self.release.wait()
            else:
                await trio.sleep(0.01)
            self.done.append(job)
        finally:
            self.running -= 1


async def test_steps_that_hang_do_not_keep_the_others_from_running(autojump_clock: trio.abc.Clock) -> None:
    steps = Steps()
    jobs = [f"hang-{n}" for n in range(3)] + [f"quick-{n}" for n in range(6)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_pool(jobs, steps.run, workers=2, max_set_aside=8))
        await trio.sleep(SLOW_STEP_S * 3)
        # before: the two workers waited on the first two hanging steps, and nothing else ran
        assert sorted(steps.done) == [f"quick-{n}" for n in range(6)]
        assert steps.started == jobs  # in order
        assert steps.running == 3  # the three that hang, each with a worker of its own
        steps.release.set()
    assert sorted(steps.done) == sorted(jobs)
    assert steps.most <= 2 + 3  # the pool, and the steps set aside


async def test_no_more_set_aside_than_allowed(autojump_clock: trio.abc.Clock) -> None:
    steps = Steps()
    jobs = ["hang-0", "hang-1", "hang-2", "quick-0"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_pool(jobs, steps.run, workers=1, max_set_aside=2))
        await trio.sleep(SLOW_STEP_S * 5)
        assert steps.started == ["hang-0", "hang-1", "hang-2"]  # the third holds the last worker
        assert steps.done == []
        steps.release.set()
    assert steps.done[-1] == "quick-0"
    assert steps.most == 3


async def test_quick_steps_use_the_pool_alone(autojump_clock: trio.abc.Clock) -> None:
    steps = Steps()
    jobs = [f"quick-{n}" for n in range(50)]
    watched: list[float] = []
    await run_pool(jobs, steps.run, workers=4, max_set_aside=8, on_watch=lambda: watched.append(1.0))
    assert steps.started == jobs
    assert sorted(steps.done) == sorted(jobs)
    assert steps.most == 4
    await run_pool([], steps.run, workers=4, max_set_aside=8)  # nothing to run: returns


async def test_slow_holders_give_back_the_hubs_places(autojump_clock: trio.abc.Clock) -> None:
    places = HubPlaces(2)
    entered: list[str] = []
    let_go = trio.Event()

    async def hold(name: str) -> None:
        async with places.place("key"):
            entered.append(name)
            await let_go.wait()

    async with trio.open_nursery() as nursery:
        for name in ("slow-a", "slow-b", "next-a", "next-b", "later"):
            nursery.start_soon(hold, name)
            await trio.testing.wait_all_tasks_blocked()
        assert entered == ["slow-a", "slow-b"]
        places.give_back_slow()  # not slow yet
        assert entered == ["slow-a", "slow-b"]
        await trio.sleep(SLOW_STEP_S)
        places.give_back_slow()  # both slow: their places go to the next two, in turn
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(entered[2:]) == ["next-a", "next-b"]  # woken together
        places.give_back_slow()  # the next two are not slow yet
        await trio.testing.wait_all_tasks_blocked()
        assert len(entered) == 4
        let_go.set()
    assert entered[-1] == "later"
    assert places.turns.waiting == 0
    assert places.turns._free == 2  # the slow ones' blocks ending gave nothing back twice

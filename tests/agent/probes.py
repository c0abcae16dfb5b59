"""A test-only pack: an echo, a probe that waits until cancelled, one that runs `sleep 30`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Annotated

import psutil
import trio
import trio.lowlevel
from pydantic import Field

from sonde.packs.base import NoParams, Pack, Params, Result
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM_PACK

TEST_PACK = Pack("testpack", "0.0.1", "probes for the agent tests")


class EchoParams(Params):
    value: Annotated[int, Field(ge=0, le=1_000_000)]
    secret: str = ""


class Echo(Result):
    value: int
    secret: str


class Waited(Result):
    ok: bool


class Slept(Result):
    returncode: int


class Waiters:
    """What the waiting probes did: how many started, how many were cancelled."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.changed = trio.Event()

    def bump(self, attribute: str) -> None:
        setattr(self, attribute, getattr(self, attribute) + 1)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, attribute: str, count: int) -> None:
        while getattr(self, attribute) < count:
            await self.changed.wait()


def waiters_of(ctx: ProbeContext) -> Waiters:
    """The test's `Waiters`, handed to the probes through the pack settings."""
    waiters = ctx.settings.for_pack("testpack")["waiters"]
    assert isinstance(waiters, Waiters)
    return waiters


def context_with(waiters: Waiters) -> ProbeContext:
    return ProbeContext(settings=ProbeSettings(packs={"testpack": {"waiters": waiters}}))


@TEST_PACK.probe("testpack.echo.value", "Returns its params.")
async def echo(ctx: ProbeContext, params: EchoParams) -> Echo:
    await trio.lowlevel.checkpoint()
    return Echo(value=params.value, secret=params.secret)


@TEST_PACK.probe("testpack.wait.forever", "Waits until cancelled.", timeout_s=3600)
async def wait_forever(ctx: ProbeContext, params: NoParams) -> Waited:
    waiters = waiters_of(ctx)
    waiters.bump("started")
    try:
        await trio.sleep_forever()
    finally:
        waiters.bump("cancelled")


@TEST_PACK.probe("testpack.sleep.process", "Runs `sleep 30`.", timeout_s=60)
async def sleep_process(ctx: ProbeContext, params: NoParams) -> Slept:
    output = await ctx.run(["sleep", "30"])
    return Slept(returncode=output.returncode)


@TEST_PACK.probe("testpack.fail.loudly", "Refuses, naming its secret param.")
async def fail_loudly(ctx: ProbeContext, params: EchoParams) -> Echo:
    raise ValueError(f"cannot use {params.secret}")


async def eventually(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """Wait until ``condition()`` holds: for things outside trio (processes), polled every 10 ms."""
    with trio.fail_after(timeout_s):
        for _ in itertools.count():
            if condition():
                return
            await trio.sleep(0.01)


def child_named(name: str) -> psutil.Process | None:
    """A child process of this test process called ``name``, if one runs."""
    return next((child for child in psutil.Process().children() if child.name() == name), None)


def gone(process: psutil.Process) -> bool:
    return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE


async def wait_for_child(name: str) -> psutil.Process:
    await eventually(lambda: child_named(name) is not None)
    child = child_named(name)
    assert child is not None
    return child


def registry_for_tests() -> PackRegistry:
    return PackRegistry.of([SYSTEM_PACK, TEST_PACK])

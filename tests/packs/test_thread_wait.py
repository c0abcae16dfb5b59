"""A probe that waits for a worker thread says so when its deadline comes first.

With every one of the agent's threads held by slow probes (eight `system.files.list` calls on
a huge directory), a quick probe's wait for a thread counted against its deadline and it
failed as "did not finish within 5s", as if it had run and been slow. Now the error says it
waited for a thread, and `system.info` (one small file) has threads of its own.
"""

from __future__ import annotations

import os
import threading

import pytest
import trio

from sonde.packs.context import THREAD_LIMIT, ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM

REGISTRY = PackRegistry.of([SYSTEM])
DEADLINE_S = 0.5
HOLD_WAIT_S = 10


async def hold_every_slot(ctx: ProbeContext, release: threading.Event, nursery: trio.Nursery) -> None:
    """Start `THREAD_LIMIT` thread calls that wait for ``release``; return once all hold a slot."""
    for _ in range(THREAD_LIMIT):
        nursery.start_soon(ctx.in_thread, release.wait, HOLD_WAIT_S)
    with trio.fail_after(HOLD_WAIT_S):
        while ctx.threads.slots.borrowed_tokens < THREAD_LIMIT:  # noqa: ASYNC110 - nothing tells
            await trio.sleep(0.01)


async def test_a_probe_that_gets_no_thread_says_it_waited_for_one() -> None:
    ctx, release = ProbeContext(), threading.Event()
    async with trio.open_nursery() as nursery:
        await hold_every_slot(ctx, release, nursery)
        try:
            with pytest.raises(ProbeExecutionError) as caught:
                await execute_probe(
                    REGISTRY, "system.process.info", {"pid": os.getpid()}, ctx, timeout_s=DEADLINE_S
                )
        finally:
            release.set()
    assert caught.value.code == "timeout"
    message = caught.value.message
    assert f"for one of the agent's {THREAD_LIMIT} probe threads" in message, message
    assert "It did not start" in message, message


async def test_system_info_answers_while_slow_probes_hold_every_thread() -> None:
    ctx, release = ProbeContext(), threading.Event()
    async with trio.open_nursery() as nursery:
        await hold_every_slot(ctx, release, nursery)
        try:
            outcome = await execute_probe(REGISTRY, "system.info", {}, ctx, timeout_s=DEADLINE_S)
        finally:
            release.set()
    assert outcome.result["hostname"]

"""Give up on a probe while its worker thread is held, then wait for that thread to return.

The tests of probes that stop their threads when they give up share these steps: run the probe,
cancel it once its thread is inside the work (an ``entered`` event the test's fake sets), and,
after letting the thread go, wait until the context counts no thread still running.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable

import trio

from sonde.packs.context import ProbeContext

THREAD_WAIT_S = 30  # for the held thread to reach the work
RETURN_WAIT_S = 60  # for the abandoned thread to return once let go


async def _until_cancelled(probe_call: Callable[[], Awaitable[object]]) -> None:
    await probe_call()
    raise AssertionError("the probe should have been cancelled")


async def cancel_once_entered(probe_call: Callable[[], Awaitable[object]], entered: threading.Event) -> None:
    """Run ``probe_call`` and cancel it once ``entered`` is set; fails if the probe ends by itself."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_until_cancelled, probe_call)
        await trio.to_thread.run_sync(entered.wait, THREAD_WAIT_S)
        nursery.cancel_scope.cancel()


async def wait_threads_returned(ctx: ProbeContext) -> None:
    """Until no thread of ``ctx`` is stuck; raises `trio.TooSlowError` after `RETURN_WAIT_S`."""
    with trio.fail_after(RETURN_WAIT_S):
        while ctx.threads.stuck:  # noqa: ASYNC110 - nothing tells when an abandoned thread returns
            await trio.sleep(0.01)

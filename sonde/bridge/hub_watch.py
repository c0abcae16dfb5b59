"""A tool call's wait on a hub that may have stopped: its health asked every minute meanwhile.

A tool call's JSON answer comes whole at its end, and a probe may run for up to the hub's
longest ``--probe-timeout`` (an hour), so the bridge lets a tool call's answer be silent for
`TOOL_CALL_SILENCE_S`. A hub frozen (SIGSTOP, a hung machine) then held the call that long,
unless the MCP client gave up first. While a tool call waits, the hub's ``/api/v1/health`` is
asked every `WATCH_EVERY_S` on a request of its own: any answer, whatever its status, is a
hub alive and the call waits on; none within `HEALTH_TIMEOUT_S` ends the call with
`HubUnresponsive`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import httpx2
import trio

log = logging.getLogger(__name__)

WATCH_EVERY_S = 60.0
HEALTH_TIMEOUT_S = 10.0


class HubUnresponsive(Exception):
    """The hub took a tool call and then answered neither it nor its health check."""


async def while_hub_answers(
    attempt: Callable[[], Awaitable[None]],
    client: httpx2.AsyncClient,
    base_url: str,
) -> None:
    """Run ``attempt`` (a tool call), asking the hub's health every `WATCH_EVERY_S` meanwhile;
    raises `HubUnresponsive` (the call cancelled) when the hub answers neither."""
    silent = ""  # set once the health check got no answer either: why the call was given up
    every_s, timeout_s = WATCH_EVERY_S, HEALTH_TIMEOUT_S  # read now: a test shortens them

    async def watch(scope: trio.CancelScope) -> None:
        nonlocal silent
        while True:
            await trio.sleep(every_s)
            try:
                await client.get(f"{base_url}/api/v1/health", timeout=timeout_s)
            except httpx2.TimeoutException:
                silent = f"nor its health check within {timeout_s:g} s"
            except httpx2.HTTPError as exc:  # gone: the call's own connection says so, or soon will
                log.debug("the hub's health check failed: %s: %s", type(exc).__name__, exc)
                continue
            else:
                continue
            scope.cancel()
            return

    started = trio.current_time()
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch, nursery.cancel_scope)
        try:
            await attempt()
        except Exception as exc:  # raised as it came, not in the nursery's exception group
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if silent:
        raise HubUnresponsive(
            f"the Sonde hub at {base_url} took the tool call and has answered nothing for "
            f"{trio.current_time() - started:.0f} s, {silent}: it is stopped, hung or overloaded; "
            "the call was given up"
        )

"""Waiting for a hub that is not up yet, for the client's opening request only.

An MCP client starts its servers when it starts, and gives up on one whose
``initialize`` (or, on MCP 2026-07-28, ``server/discover``) fails: the user
would have to restart the client once the hub is up. So that one request,
when the hub cannot be connected to (nothing was sent), is tried again with a
growing delay for about `HUB_WAIT_S`; every other request fails at once, so a
tool call during an outage is answered with an error without delay.

And any message whose POST the hub dropped before answering (a connection it
was closing as it restarted) is sent once more, on a new connection: the
hub's tools only read, so running one twice does no harm.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import trio

from sonde.bridge import jsonrpc
from sonde.bridge.hub_session import ConnectionDropped, HubSession
from sonde.connect_failures import describe_failure, describe_tls_failure

log = logging.getLogger(__name__)

OPENING_METHODS = frozenset({jsonrpc.INITIALIZE, "server/discover"})
HUB_WAIT_S = 20.0  # about as long as a client waits for a server it starts
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 2.0
CONNECT_FAILURES = (httpx2.ConnectError, httpx2.ConnectTimeout)  # nothing reached the hub


def opens_the_session(message: Any) -> bool:
    """Whether ``message`` is the client's opening request, which may wait for the hub."""
    return isinstance(message, dict) and message.get("method") in OPENING_METHODS and "id" in message


async def wait_for_hub(
    attempt: Callable[[], Awaitable[None]], hub: HubSession, within_s: float = HUB_WAIT_S
) -> None:
    """Run ``attempt``; while it cannot connect, again after 0.25 s, 0.5 s, ... 2 s, for about ``within_s``.

    Logs once that it waits (and why), then how it ended; ``hub.outage`` says why until the hub
    is reached (what the client is told of a request given up at EOF meanwhile). Past
    ``within_s`` the last connect failure is raised; a TLS failure (a certificate it refuses)
    and any other error of ``attempt`` at once.
    """
    url = hub.url
    started = trio.current_time()
    delay, waiting = FIRST_DELAY_S, False
    while True:
        try:
            await attempt()
        except CONNECT_FAILURES as exc:
            waited_s = trio.current_time() - started
            if describe_tls_failure(exc) is not None:  # a certificate it refuses: no wait mends that
                raise
            hub.outage = describe_failure(exc)
            if waited_s + delay > within_s:
                if waiting:
                    log.error("the Sonde hub at %s did not come up within %.0f s; giving up", url, waited_s)
                raise
            if not waiting:
                log.warning(
                    "waiting for the Sonde hub at %s (%s); trying again for up to %g s",
                    url,
                    describe_failure(exc),
                    within_s,
                )
                waiting = True
            await trio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
            continue
        hub.outage = None
        if waiting:
            log.warning("reached the Sonde hub at %s after %.1f s", url, trio.current_time() - started)
        return


async def again_if_dropped(attempt: Callable[[], Awaitable[None]], url: str) -> None:
    """Run ``attempt``; if the hub dropped the connection before answering, once more.

    Raises `ConnectionDropped` when the second try fails to connect too (the
    first may have run: not a plain "cannot reach").
    """
    try:
        await attempt()
        return
    except ConnectionDropped as exc:
        log.info(
            "the Sonde hub at %s closed the connection before answering (%s); sending it again", url, exc
        )
    try:
        await attempt()
    except CONNECT_FAILURES as exc:
        raise ConnectionDropped(describe_failure(exc)) from exc

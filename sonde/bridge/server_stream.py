"""The standalone GET stream: what the hub sends outside any request, relayed to the client.

One stream per session, opened once the session is ready (after ``initialize``) and
closed when a newer session replaces it; when it drops it is reopened with the last
event id it saw, `GET_MAX_FAILURES` times in a row at most. A hub that answers the GET
with 405 has no such stream, and nothing is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from sonde.bridge.hub_session import (
    TRANSPORT_ERRORS,
    HubSession,
    describe_status,
    is_success,
    read_event_stream,
)
from sonde.bridge.sse import SSEParser
from sonde.connect_failures import describe_failure

log = logging.getLogger(__name__)

GET_RETRY_DEFAULT_S = 1.0
GET_MAX_FAILURES = 3


async def relay_server_stream(hub: HubSession, send: Callable[[Any], Awaitable[None]]) -> None:
    """Relay the standalone GET stream of each session of ``hub``, from the moment it is ready."""
    generation = 0
    while True:
        generation = await hub.wait_changed(generation)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_relay_get_stream, hub, send)
            await hub.wait_changed(generation)  # a newer session replaces this one
            nursery.cancel_scope.cancel()


async def _relay_get_stream(hub: HubSession, send: Callable[[Any], Awaitable[None]]) -> None:
    """Open the GET stream and relay it, reconnecting (with Last-Event-ID) when it drops."""

    async def deliver(message: Any) -> bool:
        await send(message)
        return False

    parser, failures = SSEParser(), 0
    while failures < GET_MAX_FAILURES:
        try:
            async with hub.listen(parser.last_event_id, silence_s=None) as response:
                if not is_success(response):
                    if response.status_code != 405:  # 405: the hub has no GET stream
                        log.info(  # 404: the hub restarted; expected, and the next session reopens it
                            "GET stream refused (%s): it reopens when the bridge next opens a hub session",
                            describe_status(response),
                        )
                    return
                failures = 0
                await read_event_stream(response, deliver, parser)
        except TRANSPORT_ERRORS as exc:
            failures += 1
            log.debug("GET stream dropped: %s", describe_failure(exc))
        await trio.sleep(parser.retry_ms / 1000 if parser.retry_ms is not None else GET_RETRY_DEFAULT_S)
    log.info(
        "GET stream lost %d times in a row (the hub down or restarting?); it reopens by itself when the "
        "bridge next opens a hub session",
        failures,
    )

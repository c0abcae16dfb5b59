"""How long the client's opening request waits for a hub that cannot be connected to, on trio's
virtual clock (the end-to-end run is in test_hub_outages.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import pytest
import trio
import trio.testing

from sonde.bridge.hub_retry import opens_the_session, wait_for_hub
from sonde.bridge.hub_session import HubSession

URL = "http://127.0.0.1:23001/mcp"


def hub() -> HubSession:
    return HubSession(httpx2.AsyncClient(), URL)


def refusing(times: int) -> tuple[list[float], Callable[[], Awaitable[None]]]:
    tries: list[float] = []

    async def attempt() -> None:
        tries.append(trio.current_time())
        if len(tries) <= times:
            raise httpx2.ConnectError("all attempts to connect to 127.0.0.1:23001 failed")

    return tries, attempt


async def test_the_delay_grows_to_2_s(autojump_clock: trio.testing.MockClock) -> None:
    tries, attempt = refusing(5)
    await wait_for_hub(attempt, hub())
    assert tries == [0, 0.25, 0.75, 1.75, 3.75, 5.75]


async def test_past_20_s_the_connect_failure_is_raised(autojump_clock: trio.testing.MockClock) -> None:
    tries, attempt = refusing(100)
    with pytest.raises(httpx2.ConnectError):
        await wait_for_hub(attempt, hub())
    assert tries[-1] == 19.75  # the next would start past 20 s
    assert len(tries) == 13


def test_only_the_opening_request_waits() -> None:
    assert opens_the_session({"jsonrpc": "2.0", "id": 0, "method": "initialize"})
    assert opens_the_session({"jsonrpc": "2.0", "id": 0, "method": "server/discover"})
    assert not opens_the_session({"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    assert not opens_the_session({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def test_while_it_waits_the_hub_says_why_it_cannot_be_reached(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """What the client is told of a request the bridge gives up on meanwhile (stdin closed)."""
    session = hub()
    seen: list[str | None] = []
    _tries, attempt = refusing(3)

    async def noting() -> None:
        seen.append(session.outage)
        await attempt()

    await wait_for_hub(noting, session)
    assert seen[0] is None
    assert seen[1:] == ["ConnectError: all attempts to connect to 127.0.0.1:23001 failed"] * 3, seen
    assert session.outage is None  # reached

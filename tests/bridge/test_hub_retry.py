"""How long the client's opening request waits for a hub that cannot be connected to, on trio's
virtual clock (the end-to-end run is in test_hub_outages.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx2
import pytest
import trio
import trio.testing

from sonde.bridge.hub_retry import opens_the_session, wait_for_hub


def refusing(times: int) -> tuple[list[float], Callable[[], Awaitable[None]]]:
    tries: list[float] = []

    async def attempt() -> None:
        tries.append(trio.current_time())
        if len(tries) <= times:
            raise httpx2.ConnectError("all attempts to connect to 127.0.0.1:23001 failed")

    return tries, attempt


async def test_the_delay_grows_to_2_s(autojump_clock: trio.testing.MockClock) -> None:
    tries, attempt = refusing(5)
    await wait_for_hub(attempt, "http://127.0.0.1:23001/mcp")
    assert tries == [0, 0.25, 0.75, 1.75, 3.75, 5.75]


async def test_past_20_s_the_connect_failure_is_raised(autojump_clock: trio.testing.MockClock) -> None:
    tries, attempt = refusing(100)
    with pytest.raises(httpx2.ConnectError):
        await wait_for_hub(attempt, "http://127.0.0.1:23001/mcp")
    assert tries[-1] == 19.75  # the next would start past 20 s
    assert len(tries) == 13


def test_only_the_opening_request_waits() -> None:
    assert opens_the_session({"jsonrpc": "2.0", "id": 0, "method": "initialize"})
    assert opens_the_session({"jsonrpc": "2.0", "id": 0, "method": "server/discover"})
    assert not opens_the_session({"jsonrpc": "2.0", "id": 1, "method": "tools/call"})
    assert not opens_the_session({"jsonrpc": "2.0", "method": "notifications/initialized"})

"""A tool call waiting on a hub that stopped is given up once the hub answers no health check either;
one waiting on a hub that still answers is not. The watch's minute is cut short here."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sonde.bridge import hub_watch
from tests.bridge.fakehub import fake_hub
from tests.bridge.peer import bridged, call
from tests.bridge.restartable import restartable_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


async def test_a_tool_call_on_a_frozen_hub_is_given_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # before: it waited for the tool call's silence limit, 3660 s, unless the client gave up first
    monkeypatch.setattr(hub_watch, "WATCH_EVERY_S", 1.0)
    monkeypatch.setattr(hub_watch, "HEALTH_TIMEOUT_S", 1.0)
    with restartable_hub(tmp_path) as hub:
        async with bridged(hub.url, hub.admin_key) as (peer, _ended):
            await peer.initialize()
            await peer.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
            assert (await peer.receive())["id"] == "p"  # the hub took `initialized` too
            hub.freeze()
            try:
                started = time.monotonic()
                await peer.send(call(7, "list_agents"))
                answer = await peer.receive()
                waited = time.monotonic() - started
            finally:
                hub.thaw()
    assert answer["id"] == 7
    message = answer["error"]["message"]
    assert message.startswith(f"the Sonde hub at {hub.url} took the tool call and has answered nothing for ")
    assert "nor its health check within 1 s: it is stopped, hung or overloaded" in message
    assert waited < 10


async def test_a_slow_tool_call_on_a_hub_that_answers_is_not_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_watch, "WATCH_EVERY_S", 0.2)
    async with fake_hub() as (fake, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(8, "wait", seconds=1.5))  # the watch asks (a 404 here: an answer) 7 times
        answer = await peer.receive()
    assert answer["id"] == 8
    assert "error" not in answer, answer
    assert len(fake.seen("GET")) >= 5  # the watch's (and the standalone stream's)

"""The bridge across the hub's outages, end to end: a real `sonde hub` that starts late,
restarts, dies or freezes under a real `sonde mcp-bridge` and the mcp SDK's own client."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.bridge.dropper import dropping
from tests.bridge.peer import call
from tests.bridge.restartable import RestartableHub, free_port_in_range, restartable_hub
from tests.bridge.test_process import bridge_process
from tests.e2e.procs import base_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def bridge_env(hub: RestartableHub, home: Path, key: str | None = None) -> dict[str, str]:
    env = base_env(home)
    env.update(SONDE_HUB_URL=hub.url, SONDE_API_KEY=key or hub.admin_key, SONDE_LOG_LEVEL="INFO")
    return env


@asynccontextmanager
async def sdk_client(env: dict[str, str], errlog: Path, mode: str = "legacy") -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "sonde", "mcp-bridge"], env=env)
    with errlog.open("w") as err, trio.fail_after(90):
        async with Client(stdio_client(params, errlog=err), mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_started_before_the_hub_waits_for_it(tmp_path: Path, mode: str) -> None:
    """Claude Desktop starts its servers with itself: a hub down then must not cost a client restart."""
    errlog = tmp_path / "bridge.err"
    with restartable_hub(tmp_path) as hub:
        hub.stop()
        async with trio.open_nursery() as nursery:

            async def start_later() -> None:
                await trio.sleep(2)
                await trio.to_thread.run_sync(hub.start)

            nursery.start_soon(start_later)
            async with sdk_client(bridge_env(hub, tmp_path / "home"), errlog, mode) as client:
                assert "list_agents" in {tool.name for tool in (await client.list_tools()).tools}
                await trio.to_thread.run_sync(hub.stop)
                started = trio.current_time()
                with pytest.raises(
                    MCPError, match=r"cannot reach the Sonde hub at http://127\.0\.0\.1:\d+/mcp"
                ):
                    await client.call_tool("list_agents", {})
                assert trio.current_time() - started < 2  # only the opening request waits
    log = errlog.read_text()
    waiting = f"waiting for the Sonde hub at {hub.url}/mcp (connection refused: nothing listens at 127.0.0.1:{hub.port}"
    assert waiting in log, log
    assert f"reached the Sonde hub at {hub.url}/mcp after " in log, log
    assert log.count("waiting for the Sonde hub") == 1, log


async def test_a_request_the_hub_drops_unanswered_is_sent_once_more(tmp_path: Path) -> None:
    """As a hub restarts, a request on a kept-alive connection gets no answer: the hub's tools only
    read, so the bridge sends it again; twice dropped, it says what happened, not "cannot reach"."""
    relay_port = free_port_in_range()
    with restartable_hub(tmp_path, "--allowed-host", f"127.0.0.1:{relay_port}") as hub:
        async with dropping(hub.port, relay_port) as (dropper, url):
            env = bridge_env(hub, tmp_path / "home")
            async with bridge_process(env, "--hub", url) as bridge:
                await bridge.peer.initialize()
                await bridge.peer.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
                assert (await bridge.peer.receive())["id"] == "p"  # the hub took `initialized` too
                dropper.drops_left = 1
                await bridge.peer.send(call(1, "list_agents"))
                answer = await bridge.peer.receive()
                assert answer["id"] == 1
                assert "result" in answer, answer
                assert dropper.dropped == 1
                dropper.drops_left = 2
                await bridge.peer.send(call(2, "list_agents"))
                failed = (await bridge.peer.receive())["error"]["message"]
                assert dropper.dropped == 3
                await bridge.peer.close()
    assert failed == (
        f"the Sonde hub at {url}/mcp closed the connection before answering (restarting, or it crashed?); "
        "the request may or may not have run; try again"
    )
    assert b"closed the connection before answering (" in bridge.stderr, bridge.stderr
    assert b"cannot reach" not in bridge.stderr


async def test_eof_with_the_hub_frozen_exits_within_the_clients_grace_period(tmp_path: Path) -> None:
    """The mcp SDK gives a server 2 s after closing its stdin, then SIGTERM: the DELETE of a
    frozen hub's session must not hold the exit past that."""
    with restartable_hub(tmp_path) as hub:
        async with bridge_process(bridge_env(hub, tmp_path / "home")) as bridge:
            await bridge.peer.initialize()
            await bridge.peer.send({"jsonrpc": "2.0", "id": "p", "method": "ping"})
            assert (await bridge.peer.receive())["id"] == "p"
            hub.freeze()
            started = trio.current_time()
            await bridge.peer.close()
            assert await bridge.exit_code() == 0
            took = trio.current_time() - started
    assert took < 2, took
    assert b"did not answer the DELETE of session" in bridge.stderr
    assert b"it expires on the hub by itself" in bridge.stderr


@pytest.mark.parametrize("outage_s", [0, 4])
async def test_a_hub_restart_logs_no_warning_about_the_get_stream(tmp_path: Path, outage_s: float) -> None:
    """The standalone GET stream dropping with the hub is expected, and it reopens with the next
    session: nothing at WARNING (it read like a fault: 'GET stream refused: HTTP 404')."""
    with restartable_hub(tmp_path) as hub:
        env = bridge_env(hub, tmp_path / "home")
        async with bridge_process(env, "--log-level", "WARNING") as bridge:
            await bridge.peer.initialize()
            await bridge.peer.send(call(1, "list_agents"))
            assert "result" in await bridge.peer.receive()
            await trio.to_thread.run_sync(hub.stop)
            await trio.sleep(outage_s)
            await trio.to_thread.run_sync(hub.start)
            await trio.sleep(1.5)  # the GET stream tries its old session again
            await bridge.peer.send(call(2, "list_agents"))
            assert "result" in await bridge.peer.receive()  # a new session, and the stream with it
            await bridge.peer.close()
    assert b"GET stream" not in bridge.stderr, bridge.stderr

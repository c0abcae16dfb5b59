"""The mcp SDK's own stdio client on `sonde mcp-bridge`, against a real hub and a real agent.

The client home was set up with `sonde login` only (see the ``fleet`` fixture):
the bridge finds the hub and key in its config. The agent also runs the
test-only ``bridgetest`` pack, whose probe runs ``sleep 317``, so a cancelled
call can be seen to reach the agent: the sleep process goes away.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.bridge.authproxy import AuthProxy
from tests.bridge.fakehub import serving
from tests.bridge.fleet import Fleet
from tests.bridge.peer import INITIALIZE, INITIALIZED, call, eventually
from tests.bridge.slowpack import SLOW_PROBE, sleepers_under
from tests.bridge.test_process import bridge_process

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

MEMORY = "system.memory.usage"
SESSION_LINE = re.compile(rb"hub session ([0-9a-f]+)")


@asynccontextmanager
async def client_via_bridge(
    fleet: Fleet, errlog: Path, mode: str = "legacy", flags: tuple[str, ...] = ()
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sonde", "mcp-bridge", *flags], env=fleet.client_env
    )
    with errlog.open("w") as err, trio.fail_after(90):
        async with Client(stdio_client(params, errlog=err), mode=mode) as client:
            yield client


@asynccontextmanager
async def client_via_proxy(fleet: Fleet, errlog: Path) -> AsyncIterator[tuple[Client, AuthProxy]]:
    """A client on a bridge that reaches the hub through `AuthProxy` (which a test may tell to
    break answers off, or forget them), and that proxy."""
    async with httpx2.AsyncClient(timeout=None) as upstream:
        proxy = AuthProxy(upstream, fleet.hub.url, fleet.hub.admin_key)
        proxy.keep_host = False
        async with serving(proxy) as proxy_url:
            flags = ("--hub", proxy_url, "--api-key", fleet.hub.admin_key)
            async with client_via_bridge(fleet, errlog, flags=flags) as client:
                yield client, proxy


async def probe(client: Client, name: str = MEMORY) -> dict[str, Any]:
    result = await client.call_tool("probe", {"agent": "alpha", "probe": name})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_initialize_list_tools_and_probe(fleet: Fleet, tmp_path: Path) -> None:
    errlog = tmp_path / "bridge.err"
    async with client_via_bridge(fleet, errlog) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None
        assert client.server_info.name == "sonde"
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"probe", "list_agents", "health_check"} <= tools
        reading = await probe(client)
        assert reading["agent"] == "alpha"
        assert reading["result"]["total_bytes"] > 0
    log = errlog.read_bytes()
    session = SESSION_LINE.search(log)
    assert session is not None, log
    assert b"ended session " + session.group(1) in log  # the DELETE on stdin EOF
    async with httpx.AsyncClient(timeout=10) as http:  # the hub no longer knows that session
        gone = await http.post(
            f"{fleet.hub.url}/mcp",
            headers={
                "Authorization": f"Bearer {fleet.hub.admin_key}",
                "Mcp-Session-Id": session.group(1).decode(),
                "MCP-Protocol-Version": "2025-11-25",
                "Accept": "application/json, text/event-stream",
            },
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    assert gone.status_code == 404


async def test_a_refused_key_reaches_the_client_as_the_hubs_reason(fleet: Fleet, tmp_path: Path) -> None:
    # hypercorn sends no reason phrase: the bridge names the status itself
    refused = pytest.RaisesExc(
        MCPError,
        match="the Sonde hub answered HTTP 401 Unauthorized: a valid API key is required",
        check=lambda error: error.code == -32603 and error.data == {"httpStatus": 401},
    )
    # the SDK's client raises it from its task groups, wrapped
    with pytest.RaisesGroup(refused, flatten_subgroups=True):
        async with client_via_bridge(fleet, tmp_path / "bridge.err", flags=("--api-key", "sonde_wrong")):
            pass


async def test_progress_notifications_reach_the_client(fleet: Fleet, tmp_path: Path) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with client_via_bridge(fleet, tmp_path / "bridge.err") as client:
        result = await client.call_tool("health_check", {"agent": "alpha"}, progress_callback=on_progress)
    assert not result.is_error, result.content
    assert progress == [(1, 1, "alpha checked")], result.structured_content


async def test_cancelling_a_slow_call_reaches_the_agent(fleet: Fleet, tmp_path: Path) -> None:
    assert fleet.agent.proc is not None
    agent_pid = fleet.agent.proc.popen.pid
    async with client_via_bridge(fleet, tmp_path / "bridge.err") as client:
        call_scope = trio.CancelScope()

        async def slow_call() -> None:
            with call_scope:
                await client.call_tool("probe", {"agent": "alpha", "probe": SLOW_PROBE})
            assert call_scope.cancelled_caught, "the slow call finished instead of being cancelled"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await eventually(lambda: sleepers_under(agent_pid), within_s=20, interval_s=0.05)
            sleepers = sleepers_under(agent_pid)
            call_scope.cancel()
        await eventually(lambda: not sleepers_under(agent_pid), within_s=10, interval_s=0.05)
        assert not any(s.is_running() and s.status() != "zombie" for s in sleepers)
        fleet.agent.proc.wait_for(re.compile(rf"probe {re.escape(SLOW_PROBE)} \(\w+\) cancelled by the hub"))
        assert (await probe(client))["result"]["total_bytes"] > 0  # the session goes on


async def test_a_session_the_hub_forgot_is_reinitialized(fleet: Fleet, tmp_path: Path) -> None:
    errlog = tmp_path / "bridge.err"
    async with client_via_bridge(fleet, errlog) as client:
        await probe(client)
        first = SESSION_LINE.search(errlog.read_bytes())
        assert first is not None
        async with httpx.AsyncClient(timeout=10) as http:  # end it behind the bridge's back
            ended = await http.delete(
                f"{fleet.hub.url}/mcp",
                headers={
                    "Authorization": f"Bearer {fleet.hub.admin_key}",
                    "Mcp-Session-Id": first.group(1).decode(),
                    "MCP-Protocol-Version": "2025-11-25",
                },
            )
        assert ended.status_code == 200
        assert (await probe(client))["result"]["total_bytes"] > 0
        assert (await probe(client))["result"]["total_bytes"] > 0
    sessions = SESSION_LINE.findall(errlog.read_bytes())
    assert len(sessions) == 2, sessions
    assert sessions[0] == first.group(1)
    assert b"re-initializing" in errlog.read_bytes()


async def test_a_client_on_the_per_request_protocol_is_served_without_a_session(
    fleet: Fleet, tmp_path: Path
) -> None:
    """mcp 2.x's Client defaults to ``mode="auto"``: ``server/discover``, then no handshake and no session.

    The bridge repeats each message's own version, method and tool name as the
    routing headers the hub checks; nothing falls back to `initialize`.
    """
    assert fleet.agent.proc is not None
    agent_pid = fleet.agent.proc.popen.pid
    errlog = tmp_path / "bridge.err"
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with client_via_bridge(fleet, errlog, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == "sonde"
        assert {"probe", "health_check"} <= {tool.name for tool in (await client.list_tools()).tools}
        assert (await probe(client))["result"]["total_bytes"] > 0
        checked = await client.call_tool("health_check", {"agent": "alpha"}, progress_callback=on_progress)
        assert not checked.is_error, checked.content
        assert progress == [1], checked.structured_content

        call_scope = trio.CancelScope()  # cancelling closes the request's own POST

        async def slow_call() -> None:
            with call_scope:
                await client.call_tool("probe", {"agent": "alpha", "probe": SLOW_PROBE})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await eventually(lambda: sleepers_under(agent_pid), within_s=20, interval_s=0.05)
            call_scope.cancel()
        await eventually(lambda: not sleepers_under(agent_pid), within_s=10, interval_s=0.05)
        assert (await probe(client))["result"]["total_bytes"] > 0
    log = errlog.read_text()
    assert "hub session" not in log  # no initialize was sent
    assert "ERROR" not in log, log


async def test_an_answer_stream_that_breaks_off_is_resumed_from_its_last_event(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Between bridge and hub, a proxy drops the health_check's event stream after its first event.

    The bridge asks the hub for the rest (GET with Last-Event-ID): the client
    sees its progress and its answer as if nothing happened.
    """
    errlog = tmp_path / "bridge.err"
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with client_via_proxy(fleet, errlog) as (client, proxy):
        proxy.cuts_left = 1
        result = await client.call_tool("health_check", {"agent": "alpha"}, progress_callback=on_progress)
        assert (await probe(client))["result"]["total_bytes"] > 0  # the session goes on
    assert proxy.cut == 1
    assert not result.is_error, result.content
    assert progress == [(1, 1, "alpha checked")], result.structured_content
    log = errlog.read_text()
    assert "the hub's answer stream broke off" in log
    assert re.search(r"resuming the answer after event \d+ \(attempt 1\)", log), log


async def test_an_answer_that_broke_off_and_cannot_be_picked_up_again_says_it_may_have_run(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The stream breaks off and every resume is answered 404 (a hub restarted meanwhile forgot
    it). Regression: the call's error said "bad answer from the Sonde hub" (and, with the hub
    down, "cannot reach"), though the hub had taken the request; it was never sent again."""
    errlog = tmp_path / "bridge.err"
    async with client_via_proxy(fleet, errlog) as (client, proxy):
        proxy.cuts_left, proxy.forgets_streams = 1, True
        with pytest.raises(MCPError) as failed:
            await client.call_tool("health_check", {"agent": "alpha"}, progress_callback=ignore)
    message = str(failed.value)
    assert "closed the connection before answering in full" in message, message
    assert "the request may or may not have run" in message, message
    assert "404" in message, message
    assert (proxy.cut, proxy.forgotten) == (1, 3)  # three tries to pick the answer up
    assert errlog.read_text().count("sending it again") == 0  # the call was not sent again


async def ignore(done: float, total: float | None, message: str | None) -> None:
    """A progress callback: with one, the hub answers a tool call as an event stream."""


async def test_a_client_that_goes_on_after_a_failed_initialize_gets_a_session_once_the_hub_answers(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The hub was unreachable when the client started: its initialize failed, but the client
    kept the bridge and sends requests. They carry no session (the hub answers 400) until the
    bridge opens one itself."""
    async with httpx2.AsyncClient(timeout=None) as upstream:
        proxy = AuthProxy(upstream, "http://127.0.0.1:9", fleet.hub.admin_key)  # nothing listens there
        proxy.keep_host = False
        async with serving(proxy) as proxy_url:
            env = {**fleet.client_env, "SONDE_LOG_LEVEL": "INFO"}
            async with bridge_process(env, "--hub", proxy_url, "--api-key", fleet.hub.admin_key) as bridge:
                await bridge.peer.send(INITIALIZE)
                failed = await bridge.peer.receive()
                assert failed["error"]["code"] == -32603
                await bridge.peer.send(INITIALIZED)
                proxy.upstream = fleet.hub.url  # the hub is back
                await bridge.peer.send(call(7, "list_agents"))
                answer = await bridge.peer.receive()
                assert answer["id"] == 7, answer
                assert not answer["result"].get("isError"), answer
                assert [a["name"] for a in answer["result"]["structuredContent"]["agents"]] == ["alpha"]
                await bridge.peer.close()
    assert b"no hub session yet (the client's initialize failed); initializing now" in bridge.stderr


async def test_a_notification_and_a_cancel_during_a_slow_call_take_effect_at_once(fleet: Fleet) -> None:
    """The hub sends a tool call's headers only with its answer: nothing the client sends meanwhile
    waits for them (it used to wait 2 s each)."""
    assert fleet.agent.proc is not None
    agent_pid = fleet.agent.proc.popen.pid
    async with bridge_process(fleet.client_env) as bridge:
        await bridge.peer.initialize()
        await bridge.peer.send(call(1, "probe", agent="alpha", probe=SLOW_PROBE))
        await eventually(lambda: sleepers_under(agent_pid), within_s=20, interval_s=0.05)
        started = trio.current_time()
        await bridge.peer.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await bridge.peer.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        assert await bridge.peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": {}}
        assert (
            trio.current_time() - started < 1.8
        )  # it used to wait ORDER_WAIT_S (2 s); margin for a loaded machine
        started = trio.current_time()
        await bridge.peer.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        )
        await eventually(lambda: not sleepers_under(agent_pid), within_s=10, interval_s=0.05)
        assert trio.current_time() - started < 1.9
        await bridge.peer.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        assert (await bridge.peer.receive())["id"] == 3  # nothing for 1: it was cancelled
        await bridge.peer.close()
        assert await bridge.exit_code() == 0


async def test_a_batch_is_refused_by_the_bridge_in_words_and_the_session_goes_on(fleet: Fleet) -> None:
    """MCP 2025-06-18 removed JSON-RPC batches and the hub takes none: it used to answer the
    bridge's POST with a 400 of pydantic's errors, said to the client as an internal error."""
    async with bridge_process(fleet.client_env) as bridge:
        await bridge.peer.initialize()
        batch = [
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            call(3, "list_agents"),
        ]
        await bridge.peer.send_raw(json.dumps(batch).encode() + b"\n")
        answers = [await bridge.peer.receive(), await bridge.peer.receive()]
        assert [a["id"] for a in answers] == [2, 3]
        for answer in answers:
            assert answer["error"]["code"] == -32600, answer
            assert answer["error"]["message"].startswith("JSON-RPC batches are not supported"), answer
            assert "each message on its own line" in answer["error"]["message"]
        await bridge.peer.send_raw(b'[{"jsonrpc": "2.0", "method": "notifications/initialized"}]\n')
        alone = await bridge.peer.receive()  # no request in it: one answer, with a null id
        assert alone["id"] is None, alone
        assert alone["error"]["code"] == -32600, alone
        await bridge.peer.send({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        assert await bridge.peer.receive() == {"jsonrpc": "2.0", "id": 4, "result": {}}
        await bridge.peer.close()
        assert await bridge.exit_code() == 0
    assert b"HTTP 400" not in bridge.stderr

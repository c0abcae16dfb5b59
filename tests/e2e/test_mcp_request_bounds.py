"""What one MCP request may hold on a real hub, and what happens when its client goes.

- a request id already in flight on its session is refused (409), on the JSON and the SSE
  answer path alike; before, the second request took the first's place in the SDK's
  transport and one of the two was never answered (its task and socket held until restart);
- a client that disconnects cancels its call: the agent's probe is cancelled and the call is
  audited ``cancelled`` (before, the probe held its agent slot to the end);
- a body past `MAX_MCP_BODY_BYTES` is refused whole (413), and one key past its share of
  concurrent requests is told to come back (429, ``Retry-After``);
- a valid key refused by the DNS-rebinding check (Origin, Host) is on the audit trail.

The session's shared hub and agents; raw HTTP on /mcp with a 2025-06-18 session.
"""

from __future__ import annotations

import json
import os
import select
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx2
import psutil
import pytest
import trio

from sonde.hub.asgi import MAX_MCP_BODY_BYTES, MAX_MCP_IN_FLIGHT_PER_KEY
from tests.e2e.harness import SharedFleet, audit_rows, descendants_running, eventually
from tests.e2e.mcpclient import initialize_request, open_raw_session
from tests.e2e.procs import RunningHub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PROTOCOL = "2025-06-18"  # a session, and SSE answers that are not resumable
SLEEP_ARGV = ["sleep", "300"]  # the e2e pack's e2e.sleep.long


async def open_session(http: httpx2.AsyncClient) -> dict[str, str]:
    """initialize + initialized by hand; the headers every later request of the session carries."""
    return await open_raw_session(http, PROTOCOL)


def tool_call(request_id: int, tool: str, arguments: dict[str, Any], progress: str | None = None) -> str:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if progress is not None:
        params["_meta"] = {"progressToken": progress}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


SLEEP_CALL = {"agent": "alpha", "probe": "e2e.sleep.long"}


async def post_call(http: httpx2.AsyncClient, body: str, headers: dict[str, str]) -> httpx2.Response:
    return await http.post("/mcp", content=body, headers=headers)


def key_client(hub: RunningHub, timeout: float = 30, key: str | None = None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        base_url=hub.url, headers={"Authorization": f"Bearer {key or hub.admin_key}"}, timeout=timeout
    )


def held_by_hub(hub: RunningHub) -> tuple[int, list[str]]:
    """The hub's open file descriptors, and its connections on its port other than the listener."""
    process = psutil.Process(hub.proc.popen.pid)
    port = urlsplit(hub.url).port
    sockets = [
        f"{c.status} {c.raddr}"
        for c in process.net_connections(kind="tcp")
        if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
    ]
    return len(os.listdir(f"/proc/{process.pid}/fd")), sockets


def outcomes(hub: RunningHub, action: str) -> list[str]:
    return [row["outcome"] for row in audit_rows(hub, action)]


async def wait_sleeping(agent_pid: int) -> None:
    await eventually(lambda: bool(descendants_running(agent_pid, SLEEP_ARGV)))


async def test_a_request_id_in_flight_on_its_session_is_refused_and_nothing_is_left_behind(
    fleet: SharedFleet,
) -> None:
    hub = fleet.hub
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    agent_pid = alpha.proc.popen.pid
    fds_before, _ = held_by_hub(hub)
    refused: list[tuple[int, dict[str, Any]]] = []

    for round_ in range(3):
        async with key_client(hub) as first, key_client(hub, timeout=10) as second:
            headers = await open_session(first)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(post_call, first, tool_call(6, "probe", SLEEP_CALL), headers)
                await wait_sleeping(agent_pid)
                # the same id again while the first is running: as JSON, then as SSE
                again = await second.post("/mcp", content=tool_call(6, "probe", SLEEP_CALL), headers=headers)
                refused.append((again.status_code, again.json()))
                health = tool_call(6, "health_check", {"categories": ["system"]}, progress=f"p{round_}")
                again = await second.post("/mcp", content=health, headers=headers)
                refused.append((again.status_code, again.json()))
                nursery.cancel_scope.cancel()  # the first client gives up: its probe is cancelled
        await eventually(lambda: not descendants_running(agent_pid, SLEEP_ARGV))

    for status, answer in refused:
        assert status == 409
        assert answer["id"] == 6
        assert answer["error"]["code"] == -32600
        assert "request id 6 is already in flight" in answer["error"]["message"]

    def let_go() -> bool:
        fds, sockets = held_by_hub(hub)
        return fds <= fds_before and not [s for s in sockets if s.startswith(psutil.CONN_CLOSE_WAIT)]

    await eventually(let_go, timeout_s=15)


async def test_a_client_that_disconnects_cancels_its_probe(fleet: SharedFleet) -> None:
    """The agent's slot is freed (its probe's process killed) and the call is audited cancelled."""
    hub = fleet.hub
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    agent_pid = alpha.proc.popen.pid
    cancelled_before = outcomes(hub, "mcp.call.probe").count("cancelled")
    probes_before = outcomes(hub, "mcp.probe").count("cancelled")

    async with key_client(hub) as http:
        headers = await open_session(http)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post_call, http, tool_call(31, "probe", SLEEP_CALL), headers)
            await wait_sleeping(agent_pid)
            nursery.cancel_scope.cancel()  # the client goes: its connection closes, nothing is sent

        await eventually(lambda: not descendants_running(agent_pid, SLEEP_ARGV), timeout_s=10)
        await eventually(lambda: outcomes(hub, "mcp.call.probe").count("cancelled") > cancelled_before)
        await eventually(lambda: outcomes(hub, "mcp.probe").count("cancelled") > probes_before)
        # the session goes on, and so does the agent
        answer = await http.post(
            "/mcp",
            content=tool_call(
                32, "probe", {"agent": "alpha", "probe": "e2e.echo.value", "params": {"value": 3}}
            ),
            headers=headers,
        )
        assert answer.json()["result"]["structuredContent"]["result"] == {"value": 3, "pid": agent_pid}


async def test_a_body_past_the_mcp_limit_is_refused_whole(fleet: SharedFleet) -> None:
    hub = fleet.hub
    async with key_client(hub) as http:
        headers = await open_session(http)
        padded = tool_call(41, "list_agents", {"pad": "x" * MAX_MCP_BODY_BYTES})
        refused = await http.post("/mcp", content=padded, headers=headers)
        assert refused.status_code == 413
        assert f"at most {MAX_MCP_BODY_BYTES} bytes" in refused.json()["error"]["message"]
        fits = await http.post("/mcp", content=tool_call(42, "list_agents", {}), headers=headers)
        assert fits.status_code == 200


def open_unfinished_post(server: tuple[str, int], netloc: str, key: str) -> socket.socket:
    """A POST to /mcp whose headers are sent and whose body is not (yet)."""
    sock = socket.create_connection(server, timeout=10)
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {netloc}\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        "Content-Length: 100\r\n\r\n"
    )
    sock.sendall(head.encode())
    return sock


def hold_again(held: list[socket.socket], server: tuple[str, int], netloc: str, key: str) -> None:
    """A request that got into the hub among the held ones took the place one of them wanted:
    that one was told to retry (429, so its socket reads); hold another in its place."""
    for index, sock in enumerate(held):
        if select.select([sock], [], [], 0)[0]:
            sock.close()
            held[index] = open_unfinished_post(server, netloc, key)


async def new_key(hub: RunningHub, name: str) -> str:
    """A new admin API key for the test alone (the shared fleet's admin key may have requests of
    other tests in flight), once the hub has read it from its database (within seconds)."""
    created = hub.cli("hub", "key", "create", "--name", name)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    await eventually(lambda: key_known(hub, key), timeout_s=20)
    return key


def key_known(hub: RunningHub, key: str) -> bool:
    with hub.client(key) as http:
        return http.get("/api/v1/agents").status_code == 200


async def test_one_key_past_its_share_of_concurrent_requests_is_told_to_retry(fleet: SharedFleet) -> None:
    hub = fleet.hub
    parts = urlsplit(hub.url)
    assert parts.hostname is not None
    assert parts.port is not None
    server, netloc = (parts.hostname, parts.port), parts.netloc
    ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    key = await new_key(hub, "in-flight-share")
    async with key_client(hub, key=key) as http:
        headers = await open_session(http)
        held = [open_unfinished_post(server, netloc, key) for _ in range(MAX_MCP_IN_FLIGHT_PER_KEY)]
        try:
            with trio.fail_after(20):
                for _ in range(400):  # the held requests reach the hub in their own time
                    refused = await http.post("/mcp", content=ping, headers=headers)
                    if refused.status_code != 200:
                        break
                    hold_again(held, server, netloc, key)
                    await trio.sleep(0.05)
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            message = refused.json()["error"]["message"]
            assert f"{MAX_MCP_IN_FLIGHT_PER_KEY} MCP requests being served" in message
            held.pop().close()  # one ends: room again
            with trio.fail_after(20):
                for _ in range(400):  # the hub sees the close in its own time
                    again = await http.post("/mcp", content=ping, headers=headers)
                    if again.status_code != 429:
                        break
                    await trio.sleep(0.05)
            assert again.status_code == 200
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize(
    ("extra", "status", "reason"),
    [({"Origin": "http://evil.example"}, 403, "origin"), ({"Host": "evil.example:80"}, 421, "host")],
)
async def test_a_valid_key_refused_by_the_dns_rebinding_check_is_audited(
    fleet: SharedFleet, extra: dict[str, str], status: int, reason: str
) -> None:
    hub = fleet.hub
    before = len(audit_rows(hub, "mcp.request"))
    async with key_client(hub) as http:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        refused = await http.post(
            "/mcp", content=json.dumps(initialize_request(PROTOCOL)), headers=headers | extra
        )
    assert refused.status_code == status

    def recorded() -> bool:
        rows = audit_rows(hub, "mcp.request")[before:]
        return any(
            row["outcome"] == "denied" and json.loads(row["detail"])["reason"] == reason for row in rows
        )

    await eventually(recorded)


async def test_a_call_running_on_after_its_client_went_still_counts_against_its_key(
    fleet: SharedFleet,
) -> None:
    """On protocol 2025-11-25 a streamed call whose client drops runs on, for a resume. Before,
    it stopped counting against its key at the drop: a key could start calls and drop them,
    without limit, until every agent's probe slots were its own."""
    hub = fleet.hub
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    parts = urlsplit(hub.url)
    assert parts.hostname is not None
    assert parts.port is not None
    server, netloc = (parts.hostname, parts.port), parts.netloc
    key = await new_key(hub, "runs-on")
    held: list[socket.socket] = []
    async with key_client(hub, key=key) as http:

        async def answered(expected: int, body: str) -> None:
            """POST ``body`` until it is answered ``expected`` (the hub sees closes in its own time)."""
            with trio.fail_after(20):
                while (await http.post("/mcp", content=body, headers=headers)).status_code != expected:
                    hold_again(held, server, netloc, key)
                    await trio.sleep(0.05)

        headers = await open_raw_session(http, "2025-11-25")
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
        async with key_client(hub, key=key) as dropped:  # answered over SSE; gone once the headers come
            slow = tool_call(51, "probe", SLEEP_CALL, progress="runs-on")
            async with dropped.stream("POST", "/mcp", content=slow, headers=headers) as answer:
                assert answer.headers["content-type"].startswith("text/event-stream")
        await wait_sleeping(alpha.proc.popen.pid)  # it runs on
        held.extend(open_unfinished_post(server, netloc, key) for _ in range(MAX_MCP_IN_FLIGHT_PER_KEY - 1))
        try:
            await answered(429, ping)  # 255 held and the call running on: the key's 256
            held.pop().close()
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 51}}
            await answered(202, json.dumps(cancel))
            await eventually(lambda: not descendants_running(alpha.proc.popen.pid, SLEEP_ARGV), timeout_s=10)
            held.append(open_unfinished_post(server, netloc, key))
            await answered(200, ping)  # the call ended: its place is free again
        finally:
            for sock in held:
                sock.close()

"""The bridge in this process, on memory streams, against the recording fake hub.

Each test is one line of the seed (or of the issue's list beyond it) seen
from both ends: what the client reads on stdout, and what the hub received.
"""

from __future__ import annotations

import json

import pytest
import trio

from tests.bridge.fakehub import GOOD_KEY, PROTOCOL_VERSION, fake_hub
from tests.bridge.peer import INITIALIZE, INITIALIZED, bridged, call, eventually
from tests.ports import free_port

pytestmark = pytest.mark.timeout(30)


def jsonrpc_lines_only(lines: list[bytes]) -> None:
    for line in lines:
        message = json.loads(line)
        assert isinstance(message, dict | list), line
        assert b"\n" not in line


async def test_headers_session_id_and_protocol_version() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, ended):
        await peer.initialize()
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert [t["name"] for t in (await peer.receive())["result"]["tools"]][:2] == ["echo", "wait"]
        await eventually(lambda: hub.get_streams == 1)
    initialize, initialized, tools_list = hub.seen("POST")
    get, delete = hub.seen("GET")[0], hub.seen("DELETE")[0]
    for request in (initialize, initialized, tools_list, get, delete):
        assert request.headers["authorization"] == f"Bearer {GOOD_KEY}"
    for request in (initialize, initialized, tools_list):
        assert request.headers["accept"] == "application/json, text/event-stream"
        assert request.headers["content-type"] == "application/json"
    assert get.headers["accept"] == "text/event-stream"
    assert "mcp-session-id" not in initialize.headers
    assert "mcp-protocol-version" not in initialize.headers
    for request in (initialized, tools_list, get, delete):
        assert request.headers["mcp-session-id"] == "session-1"
        assert request.headers["mcp-protocol-version"] == PROTOCOL_VERSION
    assert initialize.body == INITIALIZE
    assert ended.is_set()


async def test_a_notification_sent_before_the_initialize_answer_carries_the_version() -> None:
    """A client that writes ``initialize`` and ``notifications/initialized`` back to back: the
    notification waits until the answer (and the version in it) is read, not just its headers."""
    async with fake_hub(chunk_bytes=1) as (hub, url), bridged(url) as (peer, _ended):
        await peer.send(INITIALIZE)
        await peer.send(INITIALIZED)
        assert (await peer.receive())["result"]["protocolVersion"] == PROTOCOL_VERSION
        await eventually(lambda: len(hub.seen("POST")) == 2)
    [initialized] = hub.seen("POST", "notifications/initialized")
    assert initialized.headers["mcp-session-id"] == "session-1"
    assert initialized.headers.get("mcp-protocol-version") == PROTOCOL_VERSION


@pytest.mark.parametrize(
    ("options", "label"),
    [
        ({"json_answers": True}, "JSON bodies"),
        ({"line_ending": "\n"}, "SSE, LF"),
        ({"line_ending": "\r\n", "chunk_bytes": 1}, "SSE, CRLF, one byte per chunk"),
        ({"line_ending": "\r", "chunk_bytes": 7}, "SSE, CR, 7-byte chunks"),
    ],
)
async def test_json_and_sse_answers_become_single_lines(options: dict[str, object], label: str) -> None:
    async with fake_hub(**options) as (_hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(1, "echo", text="two\nlines", emoji="✓"))
        answer = await peer.receive()
    assert answer["id"] == 1, label
    assert json.loads(answer["result"]["content"][0]["text"]) == {"text": "two\nlines", "emoji": "✓"}
    jsonrpc_lines_only(peer.lines)


async def test_progress_notifications_arrive_in_order_before_the_result() -> None:
    async with fake_hub(chunk_bytes=3) as (_hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        request = call(4, "progress")
        request["params"]["_meta"] = {"progressToken": "tok"}
        await peer.send(request)
        seen = [await peer.receive() for _ in range(4)]
    assert [m.get("method") for m in seen] == ["notifications/progress"] * 3 + [None]
    assert [m["params"]["progress"] for m in seen[:3]] == [1, 2, 3]
    assert all(m["params"]["progressToken"] == "tok" for m in seen[:3])
    assert seen[3]["id"] == 4


async def test_sse_events_are_written_as_they_arrive() -> None:
    async with fake_hub(chunk_bytes=5) as (hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(3, "gated"))
        first = await peer.receive()  # the answer's body is still open: the hub waits for the gate
        assert first["method"] == "notifications/progress"
        hub.gate.set()
        assert (await peer.receive())["id"] == 3


async def test_requests_are_concurrent_and_answers_come_out_of_order() -> None:
    async with fake_hub() as (_hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        started = trio.current_time()
        await peer.send(call("slow", "wait", seconds=0.6))
        await peer.send(call("quick", "echo"))
        first, second = await peer.receive(), await peer.receive()
        took = trio.current_time() - started
    assert (first["id"], second["id"]) == ("quick", "slow")
    assert took < 1.2  # not 0.6 s for each


async def test_server_messages_on_the_get_stream_reach_the_client() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await eventually(lambda: hub.get_streams == 1)
        note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        ping = {"jsonrpc": "2.0", "id": "srv-1", "method": "ping"}
        await hub.push(note)
        await hub.push(ping)
        assert await peer.receive() == note
        assert await peer.receive() == ping
        await peer.send({"jsonrpc": "2.0", "id": "srv-1", "result": {}})  # the client answers the hub
        await eventually(
            lambda: any(r.body == {"jsonrpc": "2.0", "id": "srv-1", "result": {}} for r in hub.requests)
        )


async def test_non_2xx_becomes_error_32603_naming_the_status() -> None:
    async with fake_hub() as (_hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(9, "fail"))
        answer = await peer.receive()
    assert answer["id"] == 9
    assert answer["error"]["code"] == -32603
    assert "HTTP 500" in answer["error"]["message"]
    assert "boom" in answer["error"]["message"]
    assert answer["error"]["data"] == {"httpStatus": 500}


async def test_a_2xx_that_is_not_mcp_becomes_error_32603() -> None:
    async with fake_hub() as (_hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(10, "html"))
        answer = await peer.receive()
    assert answer["id"] == 10
    assert answer["error"]["code"] == -32603
    assert "bad answer from the Sonde hub" in answer["error"]["message"]
    assert "'text/plain'" in answer["error"]["message"]


async def test_a_refused_key_is_error_32603_with_the_hubs_reason() -> None:
    async with fake_hub() as (hub, url), bridged(url, key="sonde_wrong") as (peer, _ended):
        await peer.send(INITIALIZE)
        answer = await peer.receive()
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # no id: no answer
        await peer.close()
        assert await peer.rest() == []
    assert answer["id"] == 0
    assert answer["error"]["code"] == -32603
    assert "HTTP 401" in answer["error"]["message"]
    assert "a valid API key is required" in answer["error"]["message"]  # the hub's reason, and the bridge's:
    assert (
        "refused the API key the bridge took from --api-key (wrong or revoked)" in answer["error"]["message"]
    )
    assert "the bridge reads it only at start" in answer["error"]["message"]
    assert not hub.seen("DELETE")  # there never was a session


async def test_network_error_becomes_error_32603() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"  # nothing listens here now
    async with bridged(url) as (peer, _ended):  # not initialize: that one waits for the hub (hub_retry)
        await peer.send({"jsonrpc": "2.0", "id": 0, "method": "ping"})
        answer = await peer.receive()
        await peer.send(call(2, "echo"))
        second = await peer.receive()
    assert answer["id"] == 0
    assert answer["error"]["code"] == -32603
    assert answer["error"]["message"] == (
        f"cannot reach the Sonde hub at {url}/mcp: connection refused: nothing listens at "
        f"127.0.0.1:{port} (is the hub running?)"
    )
    assert second["id"] == 2
    assert second["error"]["code"] == -32603


async def test_expired_session_reinitializes_once_and_retries() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await eventually(lambda: hub.get_streams == 1)
        hub.forget_sessions()
        await peer.send(call(5, "echo", again=True))
        answer = await peer.receive()
        assert json.loads(answer["result"]["content"][0]["text"]) == {"again": True}
        await peer.send(call(6, "echo"))
        assert (await peer.receive())["id"] == 6
        await eventually(lambda: hub.get_streams == 2)
    posts = [(r.rpc_method, r.headers.get("mcp-session-id")) for r in hub.seen("POST")]
    assert posts == [
        ("initialize", None),
        ("notifications/initialized", "session-1"),
        ("tools/call", "session-1"),  # 404: the hub forgot it
        ("initialize", None),  # the client's own initialize, replayed
        ("notifications/initialized", "session-2"),
        ("tools/call", "session-2"),  # the retry
        ("tools/call", "session-2"),
    ]
    assert [r.body for r in hub.seen("POST", "initialize")] == [INITIALIZE, INITIALIZE]
    assert hub.seen("GET")[-1].headers["mcp-session-id"] == "session-2"
    assert hub.seen("DELETE")[0].headers["mcp-session-id"] == "session-2"
    assert [line for line in peer.lines if b'"protocolVersion"' in line] == [peer.lines[0]]  # one answer


async def test_expiry_that_reinitializing_cannot_fix_fails_the_request_once() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await eventually(lambda: hub.get_streams == 1)
        hub.forget_sessions()
        hub.accept_initialize = False
        await peer.send(call(7, "echo"))
        answer = await peer.receive()
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32603
    assert "HTTP 404" in answer["error"]["message"]
    assert len(hub.seen("POST", "initialize")) == 2  # the original and one replay, no loop


async def test_cancelled_notification_follows_its_request_and_ends_the_wait() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, _ended):
        await peer.initialize()
        await peer.send(call(8, "hang"))
        await eventually(lambda: hub.hanging == 1)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8}}
        await peer.send(cancel)  # the call's POST is closed, then the cancel follows it
        await eventually(lambda: hub.hang_disconnects == 1)
        await eventually(lambda: len(hub.seen("POST", "notifications/cancelled")) == 1)
        await peer.send(call(9, "echo"))
        assert (await peer.receive())["id"] == 9  # nothing was written for 8
    methods = [r.rpc_method for r in hub.seen("POST")]
    assert methods.index("tools/call") < methods.index("notifications/cancelled")
    assert hub.seen("POST", "notifications/cancelled")[0].body == cancel


async def test_eof_deletes_the_session_and_ends_the_bridge() -> None:
    async with fake_hub() as (hub, url), bridged(url) as (peer, ended):
        await peer.initialize()
        await peer.close()
        assert await peer.rest() == []
        with trio.fail_after(5):
            await ended.wait()
        [delete] = hub.seen("DELETE")
        assert delete.headers["mcp-session-id"] == "session-1"
        assert hub.sessions == set()


async def test_eof_lets_requests_in_flight_finish_briefly() -> None:
    async with fake_hub() as (hub, url):
        async with bridged(url) as (peer, ended):
            await peer.initialize()
            await peer.send(call(1, "wait", seconds=0.2))
            await peer.send(call(2, "hang"))
            await peer.close()  # like `printf ... | sonde mcp-bridge`
            answers = await peer.rest()
            await ended.wait()
        await eventually(lambda: hub.hang_disconnects == 1)
    assert [a["id"] for a in answers] == [1, 2]  # the quick one made it, the hung one did not hold the exit
    assert "result" in answers[0]
    assert "stdin closed" in answers[1]["error"]["message"]
    assert len(hub.seen("DELETE")) == 1


async def test_cancelling_the_bridge_deletes_the_session() -> None:
    async with fake_hub() as (hub, url):
        with trio.move_on_after(10) as scope:
            async with bridged(url) as (peer, _ended):
                await peer.initialize()
                await peer.send(call(1, "hang"))
                await eventually(lambda: hub.hanging == 1)
                scope.cancel()  # what SIGTERM does in the real process
        assert scope.cancelled_caught
        [delete] = hub.seen("DELETE")
        assert delete.headers["mcp-session-id"] == "session-1"


async def test_stdout_carries_only_jsonrpc_and_bad_lines_get_parse_errors() -> None:
    async with fake_hub() as (_hub, url), bridged(url) as (peer, _ended):
        await peer.send_raw(b"\n   \n")  # blank lines are skipped
        for bad in (
            b"this is not json",
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\ud800"}}',
        ):
            await peer.send_raw(bad + b"\n")
            answer = await peer.receive()
            assert answer["id"] is None
            assert answer["error"]["code"] == -32700
        await peer.send_raw(json.dumps(INITIALIZE).encode() + b"\r\n")
        assert (await peer.receive())["id"] == 0
    jsonrpc_lines_only(peer.lines)

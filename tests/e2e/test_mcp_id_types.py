"""JSON-RPC ids ``7`` and ``"7"`` are two requests on a real hub, not a repeat of one.

The SDK's transport keys each answer by ``str(id)``, so the two cannot be
answered at the same time: the second waits for the first to end, then is
answered as itself. A true repeat of an id in flight (same value, same type)
is still refused with 409, as is a repeat of the one that waits.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
import trio

from tests.e2e.harness import SharedFleet, descendants_running, eventually
from tests.e2e.test_mcp_request_bounds import SLEEP_ARGV, SLEEP_CALL, key_client, open_session, wait_sleeping

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

WAITS = "request '7' waits for request 7 to end"


def probe_call(request_id: int | str, arguments: dict[str, Any]) -> str:
    params = {"name": "probe", "arguments": arguments}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


def echo(value: int) -> dict[str, Any]:
    return {"agent": "alpha", "probe": "e2e.echo.value", "params": {"value": value}}


async def test_ids_7_and_quoted_7_are_both_answered_and_a_true_repeat_is_refused(fleet: SharedFleet) -> None:
    alpha = fleet.agents["alpha"]
    assert alpha.proc is not None
    agent_pid = alpha.proc.popen.pid
    answers: dict[str, httpx2.Response] = {}

    async def post(http: httpx2.AsyncClient, label: str, body: str, headers: dict[str, str]) -> None:
        answers[label] = await http.post("/mcp", content=body, headers=headers)

    async with (
        key_client(fleet.hub) as first,
        key_client(fleet.hub) as second,
        key_client(fleet.hub) as third,
    ):
        headers = await open_session(first)
        async with trio.open_nursery() as nursery:
            sleeping = trio.CancelScope()

            async def sleep_call() -> None:
                with sleeping:
                    await post(first, "7 sleeps", probe_call(7, SLEEP_CALL), headers)

            nursery.start_soon(sleep_call)
            await wait_sleeping(agent_pid)
            repeat = await third.post("/mcp", content=probe_call(7, echo(1)), headers=headers)
            assert repeat.status_code == 409, repeat.text
            assert "request id 7 is already in flight" in repeat.json()["error"]["message"]

            nursery.start_soon(post, second, '"7"', probe_call("7", echo(2)), headers)
            # "7" cannot be answered while 7 runs (the SDK keys answers by str(id)): it waits, and
            # counts as in flight
            await eventually(lambda: any(WAITS in line for line in fleet.hub.proc.lines))
            repeat = await third.post("/mcp", content=probe_call("7", echo(3)), headers=headers)
            assert repeat.status_code == 409, repeat.text
            assert repeat.json()["id"] == "7"
            assert '"7"' not in answers
            sleeping.cancel()  # 7's client goes: the hub cancels 7, then answers "7"
        await eventually(lambda: not descendants_running(agent_pid, SLEEP_ARGV))

    quoted = answers['"7"']
    assert quoted.status_code == 200, quoted.text
    assert quoted.json()["id"] == "7"
    assert quoted.json()["result"]["structuredContent"]["result"] == {"value": 2, "pid": agent_pid}

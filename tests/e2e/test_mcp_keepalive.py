"""End to end, a slow tool call that asks for progress gets its response headers at once and a
keepalive while it waits; one that does not is answered as one JSON body when it ends.

Claude Code gives up on a tools/call whose response headers have not come within 60 s, and on
a stream silent for 300 s: a probe may run up to the hub's --probe-timeout (an hour). A real
`sonde hub`, one agent with a test pack whose probe sleeps as long as it is told, raw HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from sonde.bridge.sse import SSEParser
from sonde.hub.mcp_keepalive import KEEPALIVE_INTERVAL_S
from tests.e2e.mcpclient import open_raw_session
from tests.e2e.procs import RunningHub, enroll_agent, running_hub, wait_until
from tests.testpacks import install_test_pack

pytestmark = pytest.mark.e2e

PROTOCOL = "2025-11-25"  # Claude Code's
PROBE_TIMEOUT_S = 30
SLOW_S = KEEPALIVE_INTERVAL_S + 3  # past the first keepalive, well short of the probe timeout

SLOW_PACK_SOURCE = '''
"""Test-only pack: a probe that sleeps as long as it is told."""
import trio
from pydantic import Field

from sonde.packs.base import Pack, Params, Result

PACK = Pack("slow", "0.0.1", "A probe that takes its time.")


class SleepParams(Params):
    seconds: float = Field(ge=0, le=600)


class Slept(Result):
    seconds: float


@PACK.probe("slow.sleep.seconds", "Sleeps `seconds`, then says so.", timeout_s=600)
async def sleep_seconds(ctx, params: SleepParams) -> Slept:
    await trio.sleep(params.seconds)
    return Slept(seconds=params.seconds)
'''


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    tmp: Path = tmp_path_factory.mktemp("keepalive")
    site = install_test_pack(tmp / "site", "slow", SLOW_PACK_SOURCE)
    timeout = str(PROBE_TIMEOUT_S)
    with running_hub(tmp, "--heartbeat-interval", "1", "--probe-timeout", timeout, site=site) as hub:
        agent = enroll_agent(hub, tmp, "alpha", site)
        agent.start()
        try:
            wait_until(lambda: hub.statuses() == {"alpha": "online"}, timeout=30)
            yield hub
        finally:
            agent.stop()


def slow_probe(request_id: int, seconds: float, progress_token: str | None) -> str:
    params: dict[str, Any] = {
        "name": "probe",
        "arguments": {"agent": "alpha", "probe": "slow.sleep.seconds", "params": {"seconds": seconds}},
    }
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


async def test_a_slow_probe_with_a_progress_token_streams_at_once_and_is_kept_alive(hub: RunningHub) -> None:
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    seen: list[tuple[float, dict[str, Any]]] = []  # (seconds after the POST, message)
    async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=SLOW_S + 15) as http:
        headers = await open_raw_session(http, PROTOCOL)
        with trio.fail_after(SLOW_S + 10):
            posted_at = time.monotonic()
            async with http.stream(
                "POST", "/mcp", content=slow_probe(7, SLOW_S, "k7"), headers=headers
            ) as answer:
                headers_after = time.monotonic() - posted_at
                assert answer.status_code == 200
                assert answer.headers["content-type"].startswith("text/event-stream")
                parser = SSEParser()
                async for chunk in answer.aiter_bytes():
                    for event in parser.feed(chunk):
                        if event.data.strip():
                            seen.append((time.monotonic() - posted_at, json.loads(event.data)))

    # before, they came with the answer, after the probe's 18 s
    assert headers_after < SLOW_S / 2, f"the response headers came {headers_after:.1f} s after the POST"
    progress = [(at, m["params"]) for at, m in seen if m.get("method") == "notifications/progress"]
    assert len(progress) == 1, seen  # one interval in the probe's 18 s
    at, keepalive = progress[0]
    assert at > KEEPALIVE_INTERVAL_S - 1, f"a keepalive {at:.1f} s after the POST"
    assert seen[-1][0] > at  # and the answer after it
    assert keepalive == {
        "progressToken": "k7",
        "progress": KEEPALIVE_INTERVAL_S,
        "total": PROBE_TIMEOUT_S,
        "message": f"waiting for alpha: slow.sleep.seconds, {KEEPALIVE_INTERVAL_S:g} s of {PROBE_TIMEOUT_S} s",
    }
    at, result = seen[-1]
    assert result["id"] == 7
    assert result["result"]["isError"] is False, result
    assert result["result"]["structuredContent"]["result"]["seconds"] == SLOW_S
    assert at >= SLOW_S


async def test_a_probe_without_a_progress_token_is_one_json_body(hub: RunningHub) -> None:
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=15) as http:
        headers = await open_raw_session(http, PROTOCOL)
        answer = await http.post("/mcp", content=slow_probe(8, 1, None), headers=headers)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    result = answer.json()
    assert result["id"] == 8
    assert result["result"]["structuredContent"]["result"]["seconds"] == 1


async def test_a_client_that_takes_only_json_gets_its_answer_without_progress(hub: RunningHub) -> None:
    """A progress token with ``Accept: application/json`` alone: its answer as one JSON body, as
    before calls that wait on agents were streamed (they were then refused, 406)."""
    auth = {"Authorization": f"Bearer {hub.admin_key}"}
    async with httpx2.AsyncClient(base_url=hub.url, headers=auth, timeout=15) as http:
        headers = {**await open_raw_session(http, PROTOCOL), "Accept": "application/json"}
        answer = await http.post("/mcp", content=slow_probe(9, 1, "k9"), headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.json()["result"]["structuredContent"]["result"]["seconds"] == 1

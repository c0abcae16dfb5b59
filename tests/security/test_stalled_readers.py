"""A client that asks and never reads the answer is dropped, not kept for as long as it likes.

Hypercorn wrote each answer shielded and without a deadline: thousands of such sockets from one
address, with no key, held the hub's file descriptors (REST timed out, agents could not
connect) and, on /mcp, every place among the requests served at once.

An in-process hub (`serve_hub`) on 127.0.0.1 port 0, its stall deadline cut to 2 s, and a raw
socket with a small receive buffer that asks for far more than the two sockets' buffers hold.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from sonde.hub import tcp_guard
from tests.inprocess_hub import in_process_hub

pytestmark = pytest.mark.timeout(60)

STALL_S = 2.0
ASKED = 40  # answers of some 50 KB each


@pytest.fixture
async def hub_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(tcp_guard, "SEND_STALL_S", STALL_S)
    async with in_process_hub(tmp_path) as url:
        yield url


async def test_a_client_that_reads_none_of_its_answers_is_dropped(
    hub_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    parts = urlsplit(hub_url)
    stalled = trio.socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await stalled.bind(("127.0.0.2", 0))
    await stalled.connect((parts.hostname, parts.port))
    with stalled:
        request = f"GET /api/v1/openapi.json HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode()
        await stalled.send(request * ASKED)
        async with httpx.AsyncClient(base_url=hub_url) as other:  # everyone else is served meanwhile
            assert (await other.get("/api/v1/health")).status_code == 200
        await trio.sleep(STALL_S * 3)  # reading nothing: a chunk waits past its deadline
        [said] = [r.getMessage() for r in caplog.records if r.name == "sonde.hub.tcp_guard"]
        assert said == (
            "dropped 1 connection(s) whose peer took none of the next 64 KiB of an answer within 2 s "
            "(the last from 127.0.0.2): a client that does not read what it asked for is not kept"
        )
        got = b""
        with trio.fail_after(10):
            while chunk := await stalled.recv(65536):  # what it buffered, then the hub's close
                got += chunk
        assert 1 <= got.count(b"HTTP/1.1 200 ") < ASKED

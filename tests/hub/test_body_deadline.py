"""A request body that does not arrive in time is answered 408 and its connection closed.

Headers with a Content-Length, then a byte every so often: before, such a
connection was held for as long as the client kept trickling (one address held
1,200 of them), on /mcp with a valid key and on REST routes with no key at all.

An in-process hub (`serve_hub`) on 127.0.0.1 port 0 with the deadlines cut to
1 s, and raw sockets; the REST deadline is the app's own setting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from sonde.hub import asgi, serve
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.rest import create_rest_app
from tests.inprocess_hub import in_process_hub

pytestmark = pytest.mark.timeout(60)

DEADLINE_S = 1.0


@pytest.fixture
async def hub_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setattr(asgi, "MCP_BODY_DEADLINE_S", DEADLINE_S)

    def rest_app_in_a_hurry(hub: object) -> object:
        app = create_rest_app(hub)  # type: ignore[arg-type]
        app.config["BODY_TIMEOUT"] = DEADLINE_S
        return app

    monkeypatch.setattr(serve, "create_rest_app", rest_app_in_a_hurry)
    async with in_process_hub(tmp_path) as url:
        yield url


async def trickle(url: str, head: str) -> bytes:
    """Send ``head`` then one body byte every 0.3 s; what the hub answered before it closed."""
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 0)
    answer = b""
    async with stream:
        await stream.send_all(head.encode())
        with trio.fail_after(10 * DEADLINE_S):
            while True:
                with trio.move_on_after(0.3):
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return answer  # closed by the hub
                    answer += chunk
                    continue
                try:
                    await stream.send_all(b" ")
                except trio.BrokenResourceError:
                    return answer


def admin_key(data_dir: Path) -> str:
    return (data_dir / "first-admin-key").read_text().strip()


async def test_an_mcp_body_that_trickles_in_is_answered_408_and_closed(hub_url: str, tmp_path: Path) -> None:
    netloc = urlsplit(hub_url).netloc
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {netloc}\r\nAuthorization: Bearer {admin_key(tmp_path)}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        "Content-Length: 100000\r\n\r\n{"
    )
    answer = await trickle(hub_url, head)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"connection: close" in answer.lower()
    assert b"did not arrive within 1 s" in answer


async def test_a_rest_body_that_trickles_in_is_answered_408_and_closed(hub_url: str) -> None:
    netloc = urlsplit(hub_url).netloc
    head = (
        f"POST /api/v1/agents/enroll HTTP/1.1\r\nHost: {netloc}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n{"
    )
    answer = await trickle(hub_url, head)
    assert answer.startswith(b"HTTP/1.1 408")


async def test_the_rest_app_gives_a_body_30_s(tmp_path: Path) -> None:
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        assert create_rest_app(hub).config["BODY_TIMEOUT"] == asgi.MCP_BODY_DEADLINE_S == 30

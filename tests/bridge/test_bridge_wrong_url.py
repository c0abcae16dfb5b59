"""The real bridge given a URL under which no hub answers: the client is told so, not sent a page.

Before, a 404 from another server came back as its page's text (HTML, cut at 300 characters),
and a real hub's own 404 as werkzeug's "The requested URL was not found on the server. If you
entered the URL manually please check your spelling and try again.", neither saying what to give.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.bridge.peer import INITIALIZE
from tests.bridge.test_process import bridge_process, clean_env
from tests.e2e.procs import running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

PAGE = b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>%s</body></html>"


@contextmanager
def posting_server(status: int) -> Iterator[str]:
    """A web server on 127.0.0.1 answering every POST ``status`` with an HTML page; its URL."""

    class Answer(BaseHTTPRequestHandler):
        server_version = "nginx/1.24.0"
        sys_version = ""

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = PAGE % (b"x" * 400)
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def initialize_error(tmp_path: Path, url: str, key: str = "sonde_" + "k" * 40) -> str:
    env = clean_env(tmp_path, SONDE_HUB_URL=url, SONDE_API_KEY=key)
    async with bridge_process(env) as bridge:
        await bridge.peer.send(INITIALIZE)
        answer = await bridge.peer.receive()
        await bridge.peer.close()
    message: str = answer["error"]["message"]
    assert "<html" not in message.lower(), message
    assert "xxxxx" not in message, message
    return message


async def test_another_servers_404_says_the_url_is_no_hubs(tmp_path: Path) -> None:
    with posting_server(404) as url:
        message = await initialize_error(tmp_path, url)
    assert message.startswith(
        f"{url} is not a Sonde hub's base URL: POST {url}/mcp answered 404 Not Found. Give the URL "
        "`sonde hub` prints as 'listening on'"
    ), message


async def test_a_proxys_error_page_is_described_not_relayed(tmp_path: Path) -> None:
    with posting_server(502) as url:
        message = await initialize_error(tmp_path, url)
    assert message == (
        "the Sonde hub answered HTTP 502 Bad Gateway, with an HTML page titled '502 Bad Gateway' "
        "(server: nginx/1.24.0)"
    ), message


async def test_a_hubs_url_with_a_path_after_it_is_answered_with_where_mcp_is(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        message = await initialize_error(tmp_path, f"{hub.url}/api", hub.admin_key)
    assert message.startswith(
        "the Sonde hub answered HTTP 404 Not Found: nothing is served at /api/mcp: the hub serves MCP at /mcp"
    ), message

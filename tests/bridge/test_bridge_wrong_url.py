"""The real bridge given a URL under which no hub answers: the client is told so, not sent a page.

Before, a 404 from another server came back as its page's text (HTML, cut at 300 characters),
and a real hub's own 404 as werkzeug's "The requested URL was not found on the server. If you
entered the URL manually please check your spelling and try again.", neither saying what to give.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bridge.peer import INITIALIZE
from tests.bridge.test_login_not_a_hub import web_server
from tests.bridge.test_process import bridge_process, clean_env
from tests.e2e.procs import running_hub

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

PAGE = (
    b"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>" + b"x" * 400 + b"</body></html>"
)


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
    with web_server("text/html", PAGE, 404) as url:
        message = await initialize_error(tmp_path, url)
    assert message.startswith(
        f"{url} is not a Sonde hub's base URL: POST {url}/mcp answered 404 Not Found. Give the URL "
        "`sonde hub` prints as 'listening on'"
    ), message


async def test_a_proxys_error_page_is_described_not_relayed(tmp_path: Path) -> None:
    with web_server("text/html", PAGE, 502) as url:
        message = await initialize_error(tmp_path, url)
    assert message == (
        "the Sonde hub answered HTTP 502 Bad Gateway, with an HTML page titled '502 Bad Gateway' "
        "(server: nginx/1.24.0), a proxy's answer (is the hub behind it down or slow?)"
    ), message


async def test_a_hubs_url_with_a_path_after_it_is_answered_with_where_mcp_is(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        message = await initialize_error(tmp_path, f"{hub.url}/api", hub.admin_key)
    assert message.startswith(
        "the Sonde hub answered HTTP 404 Not Found: nothing is served at /api/mcp: the hub serves MCP at /mcp"
    ), message

"""The real `sonde login` against a web server that is not a hub but answers 200 to everything:
it is refused, saying what answered instead of the hub, and nothing is saved (exit 1).

Before, any 200 passed: the answer "was not the hub's", the key could not be checked, and the
URL was saved anyway, for `sonde mcp-bridge` to fail on later. The hub's own answer (JSON, its
list of agents) is recognised: tests/bridge/test_login_cli.py saves a real hub's URL.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_any

pytestmark = pytest.mark.timeout(60)

PAGE = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>hello</body></html>"
OTHER_API = b'{"status": "ok", "items": []}'


def answering(
    content_type: str, body: bytes, status: int = 200, location: str = ""
) -> type[BaseHTTPRequestHandler]:
    class Answer(BaseHTTPRequestHandler):
        server_version = "nginx/1.24.0"
        sys_version = ""

        def do_GET(self) -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.do_GET()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Answer


@contextmanager
def web_server(content_type: str, body: bytes, status: int = 200, location: str = "") -> Iterator[str]:
    """A web server on 127.0.0.1 (a free port) answering ``status`` with ``body`` (and a
    ``location``, if any) to every GET and POST; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), answering(content_type, body, status, location))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def login(home: Path, hub_url: str) -> subprocess.CompletedProcess[str]:
    argv = [*SONDE, "login", "--hub", hub_url, "--api-key", "sonde_abc"]
    return run_any(argv, env=base_env(home), timeout=60)


def refused(done: subprocess.CompletedProcess[str], home: Path, url: str, status: int = 200) -> str:
    assert done.returncode == 1, done.stderr
    assert f"{url} is not a Sonde hub's base URL: GET {url}/api/v1/agents answered {status}" in done.stderr
    assert "Give the URL `sonde hub` prints as 'listening on'" in done.stderr
    assert "nothing saved" in done.stderr
    assert "saved the hub URL" not in done.stderr
    assert not (home / ".sonde").exists()
    return done.stderr


def test_a_web_page_that_answers_200_is_no_hub_and_nothing_is_saved(tmp_path: Path) -> None:
    with web_server("text/html; charset=utf-8", PAGE) as url:
        said = refused(login(tmp_path, url), tmp_path, url)
    assert "an HTML page titled 'Welcome to nginx!' (server: nginx/1.24.0)" in said, said
    assert "not the hub's list of agents (JSON)" in said, said


def test_another_programs_json_is_no_hub_either(tmp_path: Path) -> None:
    with web_server("application/json", OTHER_API) as url:
        said = refused(login(tmp_path, url), tmp_path, url)
    assert (
        "JSON holding the keys 'status', 'items' (server: nginx/1.24.0), not the hub's list of agents" in said
    ), said


def test_a_redirect_is_no_hub_and_says_where_it_leads(tmp_path: Path) -> None:
    """A proxy sending http to https: the key is not sent after it, the URL is not saved, and the
    URL it leads to is said. Before, "could not check the key: HTTP 301", and the URL was saved."""
    https = "https://sonde.example:8443"
    with web_server("text/html", b"", 301, f"{https}/api/v1/agents") as url:
        said = refused(login(tmp_path, url), tmp_path, url, 301)
    assert f"a redirect to '{https}/api/v1/agents'" in said, said
    assert "the hub redirects nothing. Give the URL" in said, said
    assert f"if the hub is served where it leads, that is {https}; nothing saved" in said, said

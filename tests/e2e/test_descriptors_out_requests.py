"""A hub out of file descriptors still answers requests on connections it already has.

Regression: the first request imported a codec (werkzeug's routing encodes the Host with
``idna``); with every descriptor taken by other connections the import could not open its
file, and the request failed with a 500.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.procs import URL_LINE, base_env, first_admin_key, watch

pytestmark = pytest.mark.e2e

DESCRIPTORS = 96
# the hub raises its soft limit to the hard one: both are set, then the hub is exec'd
LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({DESCRIPTORS}, {DESCRIPTORS})); "
    "os.execv(sys.executable, [sys.executable, '-m', 'sonde', *sys.argv[1:]])"
)


def request(
    conn: socket.socket, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a kept-alive connection; its status, headers and body."""
    head = [
        f"{method} {path} HTTP/1.1",
        *(f"{k}: {v}" for k, v in headers.items()),
        f"Content-Length: {len(body)}",
    ]
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the hub closed the connection: {data!r}"
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode().split("\r\n")
    answer_headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    length = int(answer_headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        assert chunk, "the hub closed the connection mid-answer"
        rest += chunk
    return int(status_line.split()[1]), answer_headers, rest


@pytest.fixture
def limited_hub(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    data_dir = tmp_path / "hubdata"
    argv = [sys.executable, "-c", LIMITED, "hub", "--bind", "127.0.0.1:0", "--data-dir", str(data_dir)]
    proc = watch(argv, base_env(tmp_path / "hubhome"))
    try:
        key = first_admin_key(proc, data_dir)
        url = proc.wait_for(URL_LINE).group(1)
        yield url, key, proc.lines
    finally:
        proc.stop()


def test_requests_on_open_connections_are_answered_with_no_descriptor_left(
    limited_hub: tuple[str, str, list[str]],
) -> None:
    url, key, hub_lines = limited_hub
    host, port = url.removeprefix("http://").split(":")
    address = (host, int(port))
    headers = {"Host": f"{host}:{port}", "Authorization": f"Bearer {key}"}
    with ExitStack() as held:
        rest = held.enter_context(socket.create_connection(address, timeout=10))
        mcp = held.enter_context(socket.create_connection(address, timeout=10))
        for _ in range(DESCRIPTORS + 20):  # more than the hub can accept
            held.enter_context(socket.create_connection(address, timeout=10))
        deadline = time.monotonic() + 20
        while not any("accept returned EMFILE" in line for line in hub_lines):
            assert time.monotonic() < deadline, "the hub never ran out of descriptors"
            time.sleep(0.1)

        status, _, body = request(rest, "GET", "/api/v1/agents", headers)
        assert status == 200, "\n".join(hub_lines[-40:])

        mcp_headers = {
            **headers,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        status, answered, body = request(mcp, "POST", "/mcp", mcp_headers, json.dumps(initialize).encode())
        assert status == 200, body
        session = {**mcp_headers, "Mcp-Session-Id": answered["mcp-session-id"]}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        status, _, body = request(mcp, "POST", "/mcp", session, json.dumps(initialized).encode())
        assert status == 202, body
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "list_capabilities", "arguments": {}},
        }
        status, _, body = request(mcp, "POST", "/mcp", session, json.dumps(call).encode())
        assert status == 200, body
        assert b'"isError":false' in body.replace(b" ", b""), body

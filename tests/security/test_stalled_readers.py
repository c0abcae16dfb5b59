"""A client that asks and never reads the answer is dropped, not kept for as long as it likes.

Hypercorn wrote each answer shielded and without a deadline: thousands of such sockets from one
address, with no key, held the hub's file descriptors (REST timed out, agents could not
connect) and, on /mcp, every place among the requests served at once.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

from sonde.hub.tcp_guard import SEND_STALL_S
from tests.e2e.procs import running_hub
from tests.security.test_attack_connections import assert_hub_serves, server_of

ASKED = 40  # answers of some 50 KB each: far more than the two sockets' buffers hold


def read_to_the_end(sock: socket.socket) -> bytes:
    """What ``sock`` still holds, until the hub's close (EOF or reset)."""
    sock.settimeout(10)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def test_a_client_that_reads_none_of_its_answers_is_dropped(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub:
        server, netloc = server_of(hub)
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.bind(("127.0.0.2", 0))
        stalled.connect(server)
        try:
            stalled.sendall(f"GET /api/v1/openapi.json HTTP/1.1\r\nHost: {netloc}\r\n\r\n".encode() * ASKED)
            started = time.monotonic()
            assert_hub_serves(hub)  # everyone else is served meanwhile
            hub.proc.wait_for(
                re.compile(
                    rf"dropped 1 connection\(s\) whose peer took no bytes of an answer for {SEND_STALL_S:.0f} s "
                    r"\(the last from 127\.0\.0\.2\)"
                ),
                timeout=SEND_STALL_S + 30,
            )
            assert time.monotonic() - started > SEND_STALL_S / 2  # a stall, not the first slow write
            answers = read_to_the_end(stalled).count(b"HTTP/1.1 200 ")
            assert 1 <= answers < ASKED  # closed part way: what it buffered, then the end
        finally:
            stalled.close()
        assert_hub_serves(hub)

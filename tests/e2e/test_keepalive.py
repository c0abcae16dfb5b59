"""A response sent before the request's body was read says the connection closes.

Hypercorn closes such a connection after the response (h11 cannot take the next
request while this one's body may still be coming) without a ``Connection:
close``, so a client keeping connections alive sent its next request into a
closing socket: "Server disconnected without sending a response", at random.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.procs import RunningHub, running_hub

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHub]:
    with running_hub(tmp_path_factory.mktemp("keepalive")) as hub:
        yield hub


def response_head(hub: RunningHub, request: bytes) -> bytes:
    """The status line and headers the hub answers ``request`` with, on a raw socket."""
    host, port = hub.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.split(b"\r\n\r\n")[0].lower()


@pytest.mark.parametrize("path", ["/api/v1/api-keys", "/mcp"], ids=["rest", "mcp"])
def test_a_refusal_before_the_body_says_the_connection_closes(hub: RunningHub, path: str) -> None:
    # /mcp is answered by our own ASGI code and needed the guard; Quart already said so on REST,
    # which stays here so that neither side loses it
    # half the body announced is sent: whatever the hub answers, it has not read the body
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sonde_wrong\r\n"
        'Content-Type: application/json\r\nContent-Length: 10\r\n\r\n{"a":'
    ).encode()
    head = response_head(hub, request)
    assert head.startswith(b"http/1.1 401"), head
    assert b"\r\nconnection: close" in head


def test_an_answer_after_the_body_keeps_the_connection(hub: RunningHub) -> None:
    body = b'{"name": "k1", "role": "member"}'
    request = (
        f"POST /api/v1/api-keys HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {hub.admin_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    head = response_head(hub, request)
    assert head.startswith(b"http/1.1 201"), head
    assert b"connection: close" not in head


def test_a_pooled_client_is_never_answered_by_a_closed_socket(hub: RunningHub) -> None:
    """GETs with a body, then more requests on the same kept-alive client: every one is answered."""
    with hub.client() as http:
        for i in range(300):
            answer = http.request(
                "GET",
                f"/api/v1/agents?tag=t{i % 7}",
                content=b"{}",
                headers={"Content-Type": "application/json"},
            )
            assert answer.status_code == 200, answer.text
            assert http.get("/api/v1/agents").status_code == 200


def test_unread_guard_is_silent_without_a_body(hub: RunningHub) -> None:
    with httpx.Client(base_url=hub.url, timeout=10) as http:
        answer = http.get("/api/v1/agents")  # no key, no body: refused, and the connection stays
    assert answer.status_code == 401
    assert answer.headers.get("connection") != "close"

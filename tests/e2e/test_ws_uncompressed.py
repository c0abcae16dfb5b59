"""The hub declines permessage-deflate on its agent WebSocket, before any key is checked.

Regression: hypercorn agreed to it, and wsproto inflated a compressed frame whole before the
1 MiB message bound was counted: one 199 KiB frame (200 MiB of text) took the hub from 125
to 455 MiB and held its event loop for most of a second (a review's deflate bomb).
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import zlib
from urllib.parse import urlsplit

import pytest

from tests.e2e.harness import SharedFleet

pytestmark = pytest.mark.e2e


def compressed_text_frame(text: bytes) -> bytes:
    """A masked text frame with RSV1 set: its payload raw-deflated, as permessage-deflate sends."""
    squeezer = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = (squeezer.compress(text) + squeezer.flush(zlib.Z_SYNC_FLUSH)).removesuffix(b"\x00\x00\xff\xff")
    mask = os.urandom(4)
    size = len(payload)
    head = bytes([0x80 | 0x40 | 0x1])  # FIN, RSV1, text
    head += bytes([0x80 | 126]) + struct.pack("!H", size) if size > 125 else bytes([0x80 | size])
    return head + mask + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))


def test_a_deflate_offer_is_declined_and_a_compressed_frame_ends_the_socket(fleet: SharedFleet) -> None:
    parts = urlsplit(fleet.hub.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET /ws/agent HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(4096)
        head = answer.split(b"\r\n\r\n")[0].decode().lower()
        assert head.startswith("http/1.1 101")
        assert "sec-websocket-extensions" not in head, head
        sock.sendall(compressed_text_frame(b"A" * 64 * 1024))
        closing = b""
        while chunk := sock.recv(4096):
            closing += chunk
    # the socket ended, nothing read from the frame (at most a close frame: 1002, protocol error)
    assert closing == b"" or (closing[:1] == b"\x88" and struct.unpack("!H", closing[2:4])[0] == 1002), (
        closing
    )

"""A GET-only HTTP/1.1 client for the Docker Engine API on a unix socket.

h11 does the HTTP (chunked bodies included); this module only moves bytes
between it and a trio unix socket, one request per connection
(``Connection: close``), and keeps the body through a `BodyKeeper` that caps
it: the first bytes (`HeadKeeper`, the default) or, for a "last N" read, the
last ones (`sonde.packs.docker.logtail`). `demultiplex` splits the
stream format the logs endpoint uses when a container has no TTY: frames of an
8-byte header (stream type, three zero bytes, big-endian uint32 length) and
the payload.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlencode

import h11
import trio

from sonde.packs.base import ProbeUnavailable
from sonde.packs.context import ProbeContext
from sonde.packs.docker import DEFAULT_SOCKET

READ_CHUNK_BYTES = 65536
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
FRAME_HEADER_BYTES = 8
STREAM_NAMES = {0: "stdin", 1: "stdout", 2: "stderr"}
GROUP_HINT = (
    "the Docker socket {path} is not readable by this user: add the sonde user to the 'docker' "
    "group (root-equivalent on most hosts)"
)


class EngineError(Exception):
    """The Engine API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"Docker Engine API error {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class EngineResponse:
    status: int
    content_type: str
    body: bytes
    truncated: bool

    def json(self) -> Any:
        return json.loads(self.body)


class BodyKeeper(Protocol):
    """What keeps a response body as it arrives, within a fixed number of bytes."""

    truncated: bool  # some of the body was not kept

    def feed(self, data: bytes) -> bool:
        """Take the next piece of the body; True when no more is wanted."""
        ...

    def body(self) -> bytes: ...


class HeadKeeper:
    """The first ``max_bytes`` of a body; reading stops there."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.truncated = False
        self._kept = bytearray()

    def feed(self, data: bytes) -> bool:
        self._kept += data
        if len(self._kept) > self.max_bytes:
            del self._kept[self.max_bytes :]
            self.truncated = True
        return self.truncated

    def body(self) -> bytes:
        return bytes(self._kept)


def socket_path(ctx: ProbeContext) -> str:
    configured = ctx.settings.for_pack("docker").get("socket")
    return str(configured) if configured else str(DEFAULT_SOCKET)


def target(path: str, query: dict[str, str | int] | None = None) -> str:
    return path + ("?" + urlencode(query) if query else "")


async def _open(path: str) -> trio.SocketStream:
    try:
        return await trio.open_unix_socket(path)
    except (FileNotFoundError, ConnectionRefusedError):
        raise ProbeUnavailable(f"Docker is not available on this machine: no Engine API at {path}") from None
    except PermissionError:
        raise PermissionError(GROUP_HINT.format(path=path)) from None


async def engine_get(socket: str, request_target: str, keeper: BodyKeeper | None = None) -> EngineResponse:
    """GET ``request_target`` from the Engine API at ``socket``; ``keeper`` keeps what of the body
    fits (default: its first `DEFAULT_MAX_BODY_BYTES`).

    Raises `ProbeUnavailable` when nothing listens there, `PermissionError` naming the
    'docker' group when the socket is refused, `EngineError` on an error status.
    """
    connection = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=request_target,
        headers=[("Host", "docker"), ("User-Agent", "sonde"), ("Connection", "close")],
    )
    keeper = keeper if keeper is not None else HeadKeeper(DEFAULT_MAX_BODY_BYTES)
    stream = await _open(socket)
    async with stream:
        await stream.send_all(connection.send(request) + (connection.send(h11.EndOfMessage()) or b""))
        response: h11.Response | None = None
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(READ_CHUNK_BYTES))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                if keeper.feed(event.data):
                    break
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
    if response is None:
        raise ProbeUnavailable("the Docker Engine API closed the connection without answering")
    content_type = dict(response.headers).get(b"content-type", b"").decode()
    if response.status_code >= 400:
        raise EngineError(response.status_code, _error_message(keeper.body()))
    return EngineResponse(response.status_code, content_type, keeper.body(), keeper.truncated)


def _error_message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:300]


async def get_json(ctx: ProbeContext, path: str, query: dict[str, str | int] | None = None) -> Any:
    """The JSON document at ``path``; a 404 becomes a ValueError (the caller named something absent)."""
    try:
        response = await engine_get(socket_path(ctx), target(path, query))
    except EngineError as exc:
        if exc.status == 404:
            raise ValueError(str(exc).split(": ", 1)[-1]) from None
        raise ProbeUnavailable(str(exc)) from None
    if response.truncated:
        raise ProbeUnavailable(f"the Engine API answer to {path} exceeds {DEFAULT_MAX_BODY_BYTES} bytes")
    return response.json()


def demultiplex(payload: bytes) -> list[tuple[str, bytes]]:
    """Frames of a multiplexed stream as ``(stream name, bytes)``; a cut last frame is kept as far as it goes."""
    frames = []
    offset = 0
    while offset + FRAME_HEADER_BYTES <= len(payload):
        kind = payload[offset]
        size = int.from_bytes(payload[offset + 4 : offset + FRAME_HEADER_BYTES], "big")
        start = offset + FRAME_HEADER_BYTES
        frames.append((STREAM_NAMES.get(kind, "stdout"), payload[start : start + size]))
        offset = start + size
    return frames

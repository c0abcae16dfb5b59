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
PEER_TEXT_MAX_CHARS = 200  # of a misbehaving peer's bytes quoted in an error
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
    except OSError as exc:  # a path through a file, a path too long for a unix socket, ...
        raise ProbeUnavailable(
            f"cannot connect to the Docker Engine API socket {path}: {_reason(exc)}"
        ) from None


def _reason(exc: BaseException) -> str:
    """An OS error's own words ("Broken pipe"), without the errno and class name around them."""
    error = exc if isinstance(exc, OSError) else exc.__cause__
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error or exc)


def not_an_engine(socket: str, what: str) -> ProbeUnavailable:
    """The error for a socket that accepts connections but does not behave as the Engine API."""
    return ProbeUnavailable(f"the socket {socket} is not a working Docker Engine API: {what}")


async def engine_get(socket: str, request_target: str, keeper: BodyKeeper | None = None) -> EngineResponse:
    """GET ``request_target`` from the Engine API at ``socket``; ``keeper`` keeps what of the body
    fits (default: its first `DEFAULT_MAX_BODY_BYTES`).

    Raises `ProbeUnavailable` when nothing listens there or what listens hangs up or does not
    speak HTTP (`not_an_engine`), `PermissionError` naming the 'docker' group when the socket
    is refused, `EngineError` on an error status.
    """
    connection = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target=request_target,
        headers=[("Host", "docker"), ("User-Agent", "sonde"), ("Connection", "close")],
    )
    keeper = keeper if keeper is not None else HeadKeeper(DEFAULT_MAX_BODY_BYTES)
    stream = await _open(socket)
    try:
        async with stream:
            await stream.send_all(connection.send(request) + (connection.send(h11.EndOfMessage()) or b""))
            response = await _receive_response(stream, connection, keeper, socket)
    except trio.BrokenResourceError as exc:  # EPIPE on the request or ECONNRESET on the answer
        raise not_an_engine(socket, f"it closed the connection without answering ({_reason(exc)})") from None
    content_type = dict(response.headers).get(b"content-type", b"").decode()
    if response.status_code >= 400:
        raise EngineError(response.status_code, _error_message(keeper.body()))
    return EngineResponse(response.status_code, content_type, keeper.body(), keeper.truncated)


async def _receive_response(
    stream: trio.SocketStream, connection: h11.Connection, keeper: BodyKeeper, socket: str
) -> h11.Response:
    """The response head, its body fed to ``keeper``; a peer that breaks HTTP is `not_an_engine`."""
    response: h11.Response | None = None
    received_bytes = 0
    while True:
        try:
            event = connection.next_event()
        except h11.RemoteProtocolError as exc:
            raise not_an_engine(socket, _broken_answer(received_bytes, response, exc)) from None
        if event is h11.NEED_DATA:
            data = await stream.receive_some(READ_CHUNK_BYTES)
            received_bytes += len(data)
            connection.receive_data(data)
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            if keeper.feed(event.data):
                break
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if response is None:
        raise not_an_engine(socket, "it closed the connection without answering")
    return response


def _broken_answer(received_bytes: int, response: h11.Response | None, exc: h11.RemoteProtocolError) -> str:
    said = str(exc)[:PEER_TEXT_MAX_CHARS]  # h11 may quote what the peer sent
    if received_bytes == 0:
        return "it closed the connection without answering"
    if response is None:
        return f"it answered something other than HTTP ({said})"
    return f"it broke off its HTTP answer ({said})"


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
    try:
        return response.json()
    except ValueError:  # UnicodeDecodeError included
        kind = response.content_type or "none"
        what = f"it answered {path} with something other than JSON (Content-Type {kind})"
        raise not_an_engine(socket_path(ctx), what) from None


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

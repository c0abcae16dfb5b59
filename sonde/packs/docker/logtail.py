"""Keep the end of a logs body: its newest lines, when it is larger than a probe keeps.

``docker.container.logs`` asks for the last N lines and the Engine API sends
them oldest first, so a body cut at a size cap must lose its start, not its
end. `RawTail` keeps the last bytes of a TTY container's raw stream;
`FrameTail` follows the multiplexed stream's frames (see `engine.demultiplex`)
as they arrive and drops the oldest whole frames. Both then drop the line the
cut went through, so no line comes back half, and both hold at most
``max_bytes`` (plus the piece being taken in). Sans-I/O: `engine.engine_get`
feeds them.
"""

from __future__ import annotations

from collections import deque

from sonde.packs.docker.engine import FRAME_HEADER_BYTES

NEWLINE = ord("\n")


def after_first_line(data: bytes | bytearray) -> bytes:
    """``data`` without its first (cut) line; nothing if it holds no line end."""
    end = data.find(b"\n")
    return bytes(data[end + 1 :]) if end >= 0 else b""


class RawTail:
    """The last ``max_bytes`` of a raw stream, from the start of a line."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.truncated = False
        self._kept = bytearray()
        self._cut_mid_line = False

    def feed(self, data: bytes) -> bool:
        self._kept += data
        excess = len(self._kept) - self.max_bytes
        if excess > 0:
            self._cut_mid_line = self._kept[excess - 1] != NEWLINE
            del self._kept[:excess]
            self.truncated = True
        return False  # the end is what is wanted: read it all

    def body(self) -> bytes:
        return after_first_line(self._kept) if self._cut_mid_line else bytes(self._kept)


class FrameTail:
    """The newest frames of a multiplexed stream that fit in ``max_bytes``, headers included."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.truncated = False
        self._header = bytearray()
        self._left = 0  # payload bytes of the frame being received still to come
        self._frames: deque[tuple[int, bytearray]] = deque()  # (stream byte, payload)
        self._kept = 0
        self._oldest_cut = False  # the oldest frame kept lost its start

    def feed(self, data: bytes) -> bool:
        view = memoryview(data)
        while view:
            if self._left == 0:
                view = self._take_header(view)
                continue
            piece = view[: self._left]
            self._frames[-1][1].extend(piece)
            self._left -= len(piece)
            self._kept += len(piece)
            view = view[len(piece) :]
            self._trim()
        return False  # the end is what is wanted: read it all

    def _take_header(self, view: memoryview) -> memoryview:
        wanted = FRAME_HEADER_BYTES - len(self._header)
        self._header += view[:wanted]
        if len(self._header) == FRAME_HEADER_BYTES:
            self._left = int.from_bytes(self._header[4:], "big")
            if self._left:
                self._frames.append((self._header[0], bytearray()))
                self._kept += FRAME_HEADER_BYTES
            self._header.clear()
        return view[wanted:]

    def _trim(self) -> None:
        while self._kept > self.max_bytes:
            self.truncated = True
            if len(self._frames) > 1:
                _, payload = self._frames.popleft()
                self._kept -= FRAME_HEADER_BYTES + len(payload)
                self._oldest_cut = False
            else:  # one frame larger than everything kept: its end
                excess = self._kept - self.max_bytes
                del self._frames[0][1][:excess]
                self._kept -= excess
                self._oldest_cut = True

    def body(self) -> bytes:
        out = bytearray()
        for index, (stream, payload) in enumerate(self._frames):
            data = after_first_line(payload) if index == 0 and self._oldest_cut else payload
            if data:
                out += bytes((stream, 0, 0, 0)) + len(data).to_bytes(4, "big") + data
        return bytes(out)

"""An incremental Server-Sent Events parser: bytes in, events out, no I/O.

It follows the WHATWG ``text/event-stream`` rules: lines end in CRLF, LF or a
lone CR; ``:`` starts a comment; ``data`` lines join with ``\\n``; ``id`` sets
the last event id (unless it holds NUL); ``retry`` takes ASCII digits only; a
blank line dispatches the event, and an event with no data is not dispatched
(but its ``id`` still counts). A leading UTF-8 BOM is dropped.

Feed it whatever the socket gives, one byte or a megabyte at a time: a CR at
the end of a chunk is remembered so a CRLF split across two chunks is still
one line end. Memory is bounded: an event (its pending line plus its data)
larger than ``max_event_bytes`` raises `SSEError`.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
BOM = b"\xef\xbb\xbf"
CR, LF = 0x0D, 0x0A


class SSEError(Exception):
    """The stream broke the SSE rules we rely on (an event over the size limit)."""


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event. ``id`` is the stream's last event id when it was dispatched."""

    data: str
    event: str = "message"
    id: str = ""


class SSEParser:
    """Turn chunks of a ``text/event-stream`` body into `ServerSentEvent` values."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.last_event_id = ""
        self.retry_ms: int | None = None
        self._buffer = bytearray()
        self._bom_checked = False
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._data: list[str] = []
        self._data_bytes = 0
        self._event_type = ""
        self._event_id = ""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Take the next chunk; return the events it completed, in order. Raises `SSEError`."""
        self._buffer += chunk
        if not self._bom_checked and not self._strip_bom():
            return []
        events: list[ServerSentEvent] = []
        start = self._skip_leading_lf(0)
        next_cr = self._buffer.find(b"\r", start)
        next_lf = self._buffer.find(b"\n", start)
        while next_cr >= 0 or next_lf >= 0:
            end = min(i for i in (next_cr, next_lf) if i >= 0)
            event = self._line(bytes(self._buffer[start:end]))
            if event is not None:
                events.append(event)
            start = end + 1
            if self._buffer[end] == CR:
                self._skip_lf = True
                start = self._skip_leading_lf(start)
            if next_cr >= 0 and next_cr < start:
                next_cr = self._buffer.find(b"\r", start)
            if next_lf >= 0 and next_lf < start:
                next_lf = self._buffer.find(b"\n", start)
        del self._buffer[:start]
        if len(self._buffer) + self._data_bytes > self.max_event_bytes:
            raise SSEError(f"an SSE event is larger than {self.max_event_bytes} bytes")
        return events

    def _strip_bom(self) -> bool:
        """Drop a leading BOM; False while the buffer could still be the start of one."""
        if len(self._buffer) < len(BOM) and BOM.startswith(self._buffer):
            return False
        if self._buffer.startswith(BOM):
            del self._buffer[: len(BOM)]
        self._bom_checked = True
        return True

    def _skip_leading_lf(self, start: int) -> int:
        if self._skip_lf and start < len(self._buffer):
            self._skip_lf = False
            if self._buffer[start] == LF:
                return start + 1
        return start

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        if not raw:
            return self._dispatch()
        if raw[:1] == b":":
            return None  # a comment (servers send them as keep-alives)
        line = raw.decode("utf-8", errors="replace")
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_bytes += len(raw)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\0" not in value:
                self._event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        self.last_event_id = self._event_id
        data, event_type = self._data, self._event_type
        self._data, self._data_bytes, self._event_type = [], 0, ""
        if not data:
            return None
        return ServerSentEvent(data="\n".join(data), event=event_type or "message", id=self.last_event_id)

"""Newline-delimited lines from a byte stream, each bounded: `sonde serve --json`'s requests
and the bridge's client messages. Pure: the caller feeds the bytes it read."""

from __future__ import annotations


class LineTooLong:
    """Marks a line that exceeded the cap; its bytes were dropped."""

    def __repr__(self) -> str:
        return "LINE_TOO_LONG"


LINE_TOO_LONG_EVENT = LineTooLong()


class LineSplitter:
    """Splits a byte stream into lines, capping each at ``max_line_bytes``.

    `feed` returns the complete, non-blank lines (without the newline) and a
    `LINE_TOO_LONG_EVENT` for each over-long line, whose bytes are discarded up
    to its newline. It never holds more than ``max_line_bytes`` plus one chunk.
    """

    def __init__(self, max_line_bytes: int) -> None:
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer already known to hold no newline
        self._discarding = False  # inside an over-long line, dropping until newline

    def feed(self, data: bytes | bytearray) -> list[bytes | LineTooLong]:
        """Add ``data``; return the events it completes."""
        self._buffer += data
        events: list[bytes | LineTooLong] = []
        while (newline := self._buffer.find(b"\n", self._scanned)) >= 0:
            line = bytes(self._buffer[:newline])
            del self._buffer[: newline + 1]
            self._scanned = 0
            self._emit(line, events)
            self._discarding = False
        self._scanned = len(self._buffer)
        if len(self._buffer) > self.max_line_bytes or self._discarding:
            if not self._discarding:
                events.append(LINE_TOO_LONG_EVENT)
            self._discarding = True
            self._buffer.clear()
            self._scanned = 0
        return events

    def end(self) -> list[bytes | LineTooLong]:
        """At end of input: the last line if it had no newline."""
        events: list[bytes | LineTooLong] = []
        if not self._discarding:
            self._emit(bytes(self._buffer), events)
        self._buffer.clear()
        self._scanned = 0
        self._discarding = False
        return events

    def _emit(self, line: bytes, events: list[bytes | LineTooLong]) -> None:
        if self._discarding:
            return
        if len(line) > self.max_line_bytes:
            events.append(LINE_TOO_LONG_EVENT)
        elif line.strip():
            events.append(line)

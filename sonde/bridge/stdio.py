"""Newline-delimited lines over trio byte streams: the client's side of the bridge."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

import trio

from sonde.protocol.lines import LineSplitter
from sonde.protocol.lines import LineTooLong as SplitterTooLong

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 65536
MAX_LINE_BYTES = 8 * 1024 * 1024


class LineTooLong(Exception):
    """A line from the client went past `MAX_LINE_BYTES`; it was skipped up to its newline."""


async def read_lines(
    stream: trio.abc.ReceiveStream, max_line_bytes: int = MAX_LINE_BYTES
) -> AsyncGenerator[bytes | LineTooLong, None]:
    """Yield each non-blank line (without its newline) until EOF; a last unterminated line counts.

    An over-long line is not buffered: it is skipped and yielded as a `LineTooLong`
    value, so the caller can answer it and go on.
    """
    splitter = LineSplitter(max_line_bytes)
    while chunk := await stream.receive_some(READ_CHUNK_BYTES):
        for event in splitter.feed(chunk):
            yield _line_or_skipped(event, max_line_bytes)
    for event in splitter.end():
        yield _line_or_skipped(event, max_line_bytes)


def _line_or_skipped(event: bytes | SplitterTooLong, max_line_bytes: int) -> bytes | LineTooLong:
    if isinstance(event, SplitterTooLong):
        return LineTooLong(f"a line longer than {max_line_bytes} bytes was skipped")
    return event.strip()


async def write_lines(lines: trio.MemoryReceiveChannel[bytes], stream: trio.abc.SendStream) -> None:
    """Write each line from ``lines`` to ``stream`` until the channel closes.

    The single writer of stdout, so lines never interleave. Raises
    `trio.BrokenResourceError` when the client has closed its end.
    """
    async with lines:
        async for line in lines:
            await stream.send_all(line)

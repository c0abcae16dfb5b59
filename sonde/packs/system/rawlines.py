"""A file's lines as bytes, read forward or backward within a scan cap, NUL bytes left out.

A log truncated while its writer held it open (logrotate's copytruncate) starts with a run of
NUL bytes, as long as the file was, and the writer's next line after it; a file grown with
``truncate`` has one after its text. Such a run is no text: the readers here leave every NUL
byte out, as if the file did not hold it (a run of them alone is no line, and the line it
ran into starts where its text does), and count them in ``Skipped.nul_bytes``. Skipped before
a line is cut to what is kept of it, a run of NULs cannot push a line's text out of it.
(`sonde.packs.system.binary` first refuses a file whose sniff holds NULs among its text.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from sonde.packs.system.linescrub import LINE_MAX_CHARS, utf8_chars

BLOCK_BYTES = 64 * 1024
LINE_KEEP_BYTES = 4 * LINE_MAX_CHARS + 4  # of a longer line: more than `decode_line` keeps of it


@dataclass
class Skipped:
    """What a reader read past as no text."""

    nul_bytes: int = 0

    def without_nuls(self, data: bytes) -> bytes:
        """``data`` without its NUL bytes, which are counted."""
        text = data.replace(b"\x00", b"")
        self.nul_bytes += len(data) - len(text)
        return text


def _blocks_backwards(handle: BinaryIO, size: int, max_scan_bytes: int) -> Iterator[bytes]:
    position = size
    while position > 0 and size - position < max_scan_bytes:
        step = min(BLOCK_BYTES, position)
        position -= step
        handle.seek(position)
        yield handle.read(step)


def lines_backwards(
    handle: BinaryIO, size: int, max_scan_bytes: int, scanned: list[int], skipped: Skipped
) -> Iterator[tuple[bytes, int]]:
    """Each whole line from the end (newest first, without its newline) and the characters of it read
    past and not kept; ``scanned[0]`` counts bytes read.

    The file's first line comes last, once the scan reaches it; a line the scan cap cuts never comes.
    Of a line longer than `LINE_KEEP_BYTES` only its start is kept (all `decode_line` sends).
    """
    partial, dropped, text_seen = b"", 0, False
    for block in _blocks_backwards(handle, size, max_scan_bytes):
        scanned[0] += len(block)
        text = skipped.without_nuls(block)
        if not text:
            continue
        pieces = (text + partial).split(b"\n")
        if not text_seen and pieces[-1] == b"":
            pieces.pop()  # the file's text ends with a newline: no line after it
        text_seen = True
        if len(pieces) > 1:
            yield pieces[-1], dropped  # the line ``partial`` was the end of
            yield from ((piece, 0) for piece in reversed(pieces[1:-1]))
            dropped = 0
        partial = pieces[0][:LINE_KEEP_BYTES]  # its start comes with the next block (earlier bytes)
        dropped += utf8_chars(pieces[0][LINE_KEEP_BYTES:], line_end=not dropped)
    if scanned[0] >= size and text_seen:  # the file's first line, blank or not
        yield partial, dropped


def lines_forward(
    handle: BinaryIO, max_scan_bytes: int, scanned: list[int], skipped: Skipped
) -> Iterator[tuple[bytes, int]]:
    """Each line from the start (without its newline) and the characters of it read past and not
    kept; ``scanned[0]`` counts bytes read.

    Never more than about `BLOCK_BYTES` of one line in memory, nor more than ``max_scan_bytes``
    read in all: iterating a file object reads a whole line first, and a file with no
    newline (a sparse /var/log/lastlog) is then read whole. A longer line keeps its
    first `LINE_KEEP_BYTES` or more (more than a line sent holds) and the rest is skipped unread
    into memory.
    """
    while scanned[0] < max_scan_bytes:
        line, dropped, chunk = b"", 0, b""
        while not chunk.endswith(b"\n") and scanned[0] < max_scan_bytes:
            chunk = handle.readline(min(BLOCK_BYTES, max_scan_bytes - scanned[0]))
            if not chunk:
                break
            scanned[0] += len(chunk)
            text = skipped.without_nuls(chunk)
            if len(line) < LINE_KEEP_BYTES:
                line += text
            else:
                dropped += utf8_chars(text.removesuffix(b"\n"), line_end=text.endswith(b"\n"))
        if not line:  # the end of the file (or of the scan), NULs at most before it
            return
        yield line.removesuffix(b"\n"), dropped

"""Bounded reads of text files: the first or last N lines, or the first N bytes.

Nothing here reads a whole file into memory. `tail_lines` walks back from the
end in blocks and stops after `max_scan_bytes`; `head_lines` reads forward
under the same cap. Both count lines as ``tail -n`` and ``head -n`` do, blank
ones included (the newline that ends the file does not start another). Both take
an optional literal ``contains`` filter, so the "last 100 lines that mention
'error'" of a large log costs at most the scan cap.

Opening goes through `open_regular`: the path (already resolved by
``ProbeContext.allowed_path``) is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must
be a regular file, so a FIFO or a device can never hang or flood a probe, and a
symlink swapped in after the allow-list check is refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, BinaryIO

from pydantic import Field

from sonde.packs.context import unredacted
from sonde.packs.system.access import why_refused
from sonde.packs.system.nofollow import open_resolved
from sonde.packs.textpattern import PythonPattern

BLOCK_BYTES = 64 * 1024
MAX_SCAN_BYTES = 16 * 1024 * 1024
LINE_MAX_CHARS = 4096
BINARY_SNIFF_BYTES = 8192
TEXT_CONTROL_BYTES = frozenset(b"\t\n\r\f\b\x1b")

# Checked by Python's re (`PythonPattern`): the Rust engine spends ~8 MiB on the {0,4095} repeat.
AbsolutePath = Annotated[
    str,
    Field(
        strict=True,
        description="Absolute path; must lie inside the agent's allowed paths (symlinks resolved).",
    ),
    PythonPattern(r"^/[^\x00-\x1f]{0,4095}$"),
]
LiteralFilter = Annotated[
    str,
    Field(
        strict=True,
        description="Keep only lines containing this text (a literal, case-sensitive) once their "
        "secrets are redacted.",
    ),
    PythonPattern(r"^[^\x00-\x1f]{1,200}$"),
]


@dataclass(frozen=True)
class Lines:
    lines: list[str]
    size_bytes: int
    scanned_bytes: int
    complete: bool  # False when the scan cap stopped the search early


def permission_error(path: Path) -> PermissionError:
    """A PermissionError whose message says who may read ``path`` and what would let the agent."""
    return PermissionError(why_refused(path))


def open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (no symlink, FIFO or device)."""
    try:
        fd = open_resolved(path, os.O_RDONLY | os.O_NONBLOCK)  # no symlink followed, on the way either
    except PermissionError:
        raise permission_error(path) from None
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot open ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path}: not a regular file")
    return os.fdopen(fd, "rb")


def looks_binary(sample: bytes) -> bool:
    """True when ``sample`` holds a NUL byte or is mostly control characters (``file``-like)."""
    if b"\x00" in sample:
        return True
    control = sum(1 for byte in sample if byte < 0x20 and byte not in TEXT_CONTROL_BYTES)
    return control * 10 > len(sample)  # more than 10 % control characters


def decode_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return text if len(text) <= LINE_MAX_CHARS else text[: LINE_MAX_CHARS - 1] + "…"


def _blocks_backwards(handle: BinaryIO, size: int, max_scan_bytes: int) -> Iterator[bytes]:
    position = size
    while position > 0 and size - position < max_scan_bytes:
        step = min(BLOCK_BYTES, position)
        position -= step
        handle.seek(position)
        yield handle.read(step)


def tail_lines(
    path: Path,
    count: int,
    contains: str | None = None,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    redact: Callable[[str], str] = unredacted,
) -> Lines:
    """The last ``count`` lines of ``path`` (matching ``contains`` once redacted), oldest first."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        found: list[str] = []
        partial = b""
        scanned = 0
        for block in _blocks_backwards(handle, size, max_scan_bytes):
            pieces = (block + partial).split(b"\n")
            if scanned == 0 and pieces[-1] == b"":
                pieces.pop()  # the file ends with a newline: no line after it
            scanned += len(block)
            partial = pieces[0]
            for raw in reversed(pieces[1:]):
                if _keep(raw, contains, found, count, redact):
                    return Lines(found[::-1], size, scanned, True)
        reached_start = scanned >= size
        if reached_start and size > 0:  # the file's first line, blank or not
            _keep(partial, contains, found, count, redact)
        return Lines(found[::-1], size, scanned, reached_start)


def _keep(
    raw: bytes, contains: str | None, found: list[str], count: int, redact: Callable[[str], str]
) -> bool:
    """Add ``raw`` to ``found`` if it qualifies; True once ``count`` lines are found.

    A blank line is a line, as for ``tail``/``head``; ``contains`` never matches one.
    ``contains`` must match the line as it will be sent (``redact``), so a filter
    cannot confirm a guess at a secret the answer hides.
    """
    line = decode_line(raw)
    if contains is None or (contains in line and contains in redact(line)):
        found.append(line)
    return len(found) >= count


def head_lines(
    path: Path,
    count: int,
    contains: str | None = None,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    redact: Callable[[str], str] = unredacted,
) -> Lines:
    """The first ``count`` lines of ``path`` (matching ``contains`` once redacted)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        found: list[str] = []
        scanned = 0
        for raw, scanned in _lines_forward(handle, max_scan_bytes):
            if _keep(raw, contains, found, count, redact):
                return Lines(found, size, scanned, True)
        return Lines(found, size, scanned, scanned < max_scan_bytes or scanned >= size)


def _lines_forward(handle: BinaryIO, max_scan_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Each line from the start (without its newline), with the bytes scanned so far.

    Never more than `BLOCK_BYTES` of one line in memory, nor more than ``max_scan_bytes``
    read in all: iterating a file object reads a whole line first, and a file with no
    newline (a sparse /var/log/lastlog) is then read whole. A longer line keeps its
    first block (more than a line sent holds) and the rest is skipped unread into memory.
    """
    scanned = 0
    while scanned < max_scan_bytes:
        raw = handle.readline(min(BLOCK_BYTES, max_scan_bytes - scanned))
        if not raw:
            return
        scanned += len(raw)
        rest = raw
        while not rest.endswith(b"\n") and scanned < max_scan_bytes:
            rest = handle.readline(min(BLOCK_BYTES, max_scan_bytes - scanned))
            if not rest:
                break
            scanned += len(rest)
        yield raw.rstrip(b"\n"), scanned


@dataclass(frozen=True)
class TextRead:
    text: str
    size_bytes: int
    bytes_read: int
    truncated: bool


def read_text(path: Path, max_bytes: int) -> TextRead:
    """Up to ``max_bytes`` of ``path`` as text; a binary file raises ValueError."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(max_bytes + 1)
    truncated = len(data) > max_bytes
    data = data[:max_bytes]
    if looks_binary(data[:BINARY_SNIFF_BYTES]):
        raise ValueError(f"{path} looks like a binary file; only text files are read")
    return TextRead(data.decode("utf-8", errors="replace"), size, len(data), truncated)

"""A bounded read of a text file inside the allowed paths (`system.files.read`).

The path goes through ``ProbeContext.allowed_path`` and is opened by `open_regular` (no
symlink followed, a regular file only). At most `READ_MAX_BYTES` are read, and no more
than an answer holds; a binary file is refused (`sonde.packs.system.binary`).
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext
from sonde.packs.executor import DEFAULT_MAX_RESULT_BYTES, json_size
from sonde.packs.system import PACK
from sonde.packs.system.binary import BINARY_SNIFF_BYTES, looks_binary_past_holes
from sonde.packs.system.textfile import AbsolutePath, open_regular

# What one answer holds (the executor cuts a result at 256 KiB of JSON): text of this many
# bytes fits whole unless it is full of quotes, backslashes and newlines, which are cut to fit.
READ_MAX_BYTES = 192 * 1024
READ_ANSWER_BYTES = DEFAULT_MAX_RESULT_BYTES - 16 * 1024  # the content's JSON; the rest for the path
# An answer a client shows whole: Claude Code puts a tool result over about 50,000 characters in
# a file and shows the model its first 2 KB; 64 KiB of text came to some 66,000 as JSON.
READ_DEFAULT_BYTES = 32 * 1024


@dataclass(frozen=True)
class TextRead:
    text: str
    size_bytes: int
    bytes_read: int
    truncated: bool
    nul_bytes_skipped: int = 0


def read_text(path: Path, max_bytes: int, offset: int = 0) -> TextRead:
    """Up to ``max_bytes`` of ``path`` from byte ``offset`` as text, no more than an answer
    holds (`READ_ANSWER_BYTES` of JSON). A character cut at the end is left out (not shown as
    one the file lacks), and not counted in ``bytes_read``: the next read, at ``offset +
    bytes_read``, starts with it. NUL bytes are left out of the text and counted (a run of them
    where a log was truncated as it was written: `binary`). A binary file raises ValueError."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(offset)
        data = handle.read(max_bytes + 1)
    truncated = len(data) > max_bytes
    data = data[:max_bytes]
    if looks_binary_past_holes(data[:BINARY_SNIFF_BYTES]):
        raise ValueError(f"{path} looks like a binary file; only text files are read")
    text, kept = _decoded(data, final=not truncated)
    if json_size(text) > READ_ANSWER_BYTES:  # quotes, backslashes and newlines take two bytes each
        fits, over = 0, len(data)
        while over - fits > 1:  # the longest start of ``data`` whose text fits
            middle = (fits + over) // 2
            fits, over = (
                (middle, over)
                if json_size(_decoded(data[:middle], final=False)[0]) <= READ_ANSWER_BYTES
                else (fits, middle)
            )
        text, kept = _decoded(data[:fits], final=False)
        truncated = True
    return TextRead(text, size, kept, truncated, data[:kept].count(b"\x00"))


def _decoded(data: bytes, final: bool) -> tuple[str, int]:
    """``data`` as UTF-8 text (bytes that are not, as U+FFFD; NULs left out), and how many bytes
    the text holds: unless ``final``, a character cut at the end is left out."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=final)
    return text.replace("\x00", ""), len(data) - len(decoder.getstate()[0])


class ReadParams(Params):
    path: AbsolutePath
    max_bytes: int = Field(
        default=READ_DEFAULT_BYTES,
        ge=1,
        le=READ_MAX_BYTES,
        strict=True,
        description="Read at most this many bytes.",
    )
    offset: int = Field(
        default=0,
        ge=0,
        le=2**63 - 1,  # a file offset (off_t)
        strict=True,
        description="Start at this byte: to read on after a truncated read, its offset plus its bytes_read.",
    )


class FileContent(Result):
    path: str
    size_bytes: int
    offset: int
    bytes_read: int
    content: str
    truncated: bool
    nul_bytes_skipped: int = Field(
        description="NUL bytes left out of `content`: a run of them is what a log truncated while "
        "it was written (logrotate's copytruncate) holds where its old text was."
    )


def _read(path: Path, max_bytes: int, offset: int) -> FileContent:
    read = read_text(path, max_bytes, offset)
    return FileContent(
        path=str(path),
        size_bytes=read.size_bytes,
        offset=offset,
        bytes_read=read.bytes_read,
        content=read.text,
        truncated=read.truncated,
        nul_bytes_skipped=read.nul_bytes_skipped,
    )


@PACK.probe(
    "system.files.read",
    """A text file (allowed paths only, symlinks resolved first), up to `max_bytes`
    (default 32 KiB, at most 192 KiB) from byte `offset` (default 0): content, file size,
    the bytes read and whether the file goes on past them (then read on from offset +
    bytes_read). NUL bytes are left out of the content and counted in `nul_bytes_skipped` (a
    log truncated as it was written starts with a run of them). Binary files, directories,
    devices and FIFOs are refused. Use it to read
    a config file or a small report; for logs prefer system.logs.tail.""",
    timeout_s=10,
)
async def files_read(ctx: ProbeContext, params: ReadParams) -> FileContent:
    path = ctx.allowed_path(params.path)
    return await ctx.in_thread(_read, path, params.max_bytes, params.offset)

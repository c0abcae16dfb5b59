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
import re
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
from sonde.protocol.names import REDACTED

BLOCK_BYTES = 64 * 1024
MAX_SCAN_BYTES = 16 * 1024 * 1024
LINE_MAX_CHARS = 4096
BINARY_SNIFF_BYTES = 8192
TEXT_CONTROL_BYTES = frozenset(b"\t\n\r\f\b\x1b")
# Lines scrubbed with the ones judged, before them: more than the YAML block scalar
# (201 lines) or the private key (~100 lines of RSA 8192) the scrubber hides whole.
CONTEXT_LINES = 256
BATCH_CHARS = 1024 * 1024  # lines judged (scrubbed as one text) at a time, at most about
# A key block's END line: a private key's (PEM, OpenSSH, PGP), RFC 4716's (SSH.com's "---- END
# SSH2 ENCRYPTED PRIVATE KEY ----") and OpenVPN's static and tls-crypt-v2 keys' ("-----END OpenVPN
# Static key V1-----"). Found without its BEGIN line, it hides every line up to it.
_KEY_END = re.compile(
    r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|---- END[ A-Z0-9]{0,40}PRIVATE KEY ----"
    r"|-----END OpenVPN [A-Za-z0-9 -]{1,40}-----"
)

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
    """The last ``count`` lines of ``path`` as they will be sent (matching ``contains``), oldest first.

    Lines are judged by `_Judge`, each with up to `CONTEXT_LINES` earlier lines
    read for context, so a secret that began before the lines returned is still hidden.
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        judge = _Judge(count, contains, as_lines_of(path, redact))
        pending: list[str] = []  # decoded lines not judged yet, newest first
        ready = 0  # pending lines with `CONTEXT_LINES` read before them
        scanned = [0]
        for raw in _lines_backwards(handle, size, max_scan_bytes, scanned):
            pending.append(decode_line(raw))
            judge.chars += len(pending[-1])
            if len(pending) > CONTEXT_LINES:
                ready += judge.could_keep(pending[-1 - CONTEXT_LINES])
            if len(pending) > CONTEXT_LINES and judge.due(ready):
                judged = len(pending) - CONTEXT_LINES
                if judge.judge(pending[::-1], CONTEXT_LINES, newest_first=True):
                    return Lines(judge.found[::-1], size, scanned[0], True)
                del pending[:judged]
                ready = 0
        judge.judge(pending[::-1], 0, newest_first=True)
        return Lines(judge.found[::-1], size, scanned[0], scanned[0] >= size)


def _lines_backwards(handle: BinaryIO, size: int, max_scan_bytes: int, scanned: list[int]) -> Iterator[bytes]:
    """Each whole line from the end (newest first, without its newline); ``scanned[0]`` counts bytes read.

    The file's first line comes last, once the scan reaches it; a line the scan cap cuts never comes.
    """
    partial = b""
    for block in _blocks_backwards(handle, size, max_scan_bytes):
        pieces = (block + partial).split(b"\n")
        if scanned[0] == 0 and pieces[-1] == b"":
            pieces.pop()  # the file ends with a newline: no line after it
        scanned[0] += len(block)
        partial = pieces[0]
        yield from reversed(pieces[1:])
    if scanned[0] >= size and size > 0:  # the file's first line, blank or not
        yield partial


def as_lines_of(path: Path, redact: Callable[[str], str]) -> Callable[[str], str]:
    """``redact`` reading each text as lines of ``path``, as the agent's last scrub reads an
    answer that names its file before its lines: a rule keyed by the file (every value of
    debconf's passwords.dat, every line's secret in rsyncd's secrets or postfix's sasl_passwd)
    hides in the lines a filter judges what it hides in the lines sent, so a `contains` guess at
    such a value matches nothing. Each line scrubbed on its own (`_each`) is read as the file's
    line right after its name, whatever lines are sent before it."""
    if redact is unredacted:
        return redact
    return _FileLines(f"{path}\x00", redact)  # no rule hides across a NUL: the path is cut off after


@dataclass(frozen=True)
class _FileLines:
    """`as_lines_of`'s ``redact``: ``named`` (the path and a NUL) gives context, then is cut off."""

    named: str
    redact: Callable[[str], str]

    def __call__(self, text: str) -> str:
        return self.redact(self.named + text).partition("\x00")[2]

    def each(self, lines: list[str]) -> list[str]:
        """Each of ``lines`` as the file's line right after its name (the name before each)."""
        if any("\x00" in line for line in lines):
            return [self(line) for line in lines]
        return self.redact("".join(self.named + line + "\x00" for line in lines)).split("\x00")[1::2]


class _Judge:
    """Which lines to keep, as they will be sent: ``found`` fills up to ``count``.

    A batch of consecutive lines is scrubbed as ONE text (`redact_lines`) with the
    lines before it as context, so a key block or a YAML block scalar is hidden on
    every line it spans. ``contains`` must match the line before and after
    scrubbing, so a filter cannot confirm a guess at a secret the answer hides.
    """

    def __init__(self, count: int, contains: str | None, redact: Callable[[str], str]) -> None:
        self.count, self.contains, self.redact = count, contains, redact
        self.found: list[str] = []
        self.chars = 0  # characters of the lines read since the last judgement

    def could_keep(self, line: str) -> bool:
        return self.contains is None or self.contains in line

    def due(self, ready: int) -> bool:
        """Judge now: the lines ready could fill ``found``, or they are a full batch."""
        return len(self.found) + ready >= self.count or self.chars >= BATCH_CHARS

    def judge(self, lines: list[str], context: int, newest_first: bool = False) -> bool:
        """Judge ``lines[context:]`` (file order; the first ``context`` only give context);
        True once ``count`` lines are found. ``newest_first`` adds the newest first."""
        self.chars = 0
        context = min(context, len(lines))
        if not any(self.could_keep(line) for line in lines[context:]):
            return False
        shown, sent = _scrubbed_lines(lines, self.redact, context)
        order = range(len(lines) - 1, context - 1, -1) if newest_first else range(context, len(lines))
        for index in order:
            if self.could_keep(lines[index]) and self.could_keep(shown[index - context]):
                self.found.append(sent[index - context])
                if len(self.found) >= self.count:
                    return True
        return False


def redact_lines(lines: list[str], redact: Callable[[str], str], context: int = 0) -> list[str]:
    """``lines[context:]`` (consecutive lines of one text) as they will be sent, one for one.

    The lines are scrubbed as ONE text, so a secret spanning lines (a key block, a
    YAML block scalar) is hidden on each of them ("[REDACTED]" for a line it swallows
    whole); the first ``context`` lines only give context (the lines before a tail).
    A key's END line left (its BEGIN line was not among ``lines``) hides every line up to
    it. A line that scrubbed on its own shows the same, without its file's name too, is
    returned as it is (the agent's last scrub hides and counts its secrets); the others (a
    secret spanning lines, or one only its file's name tells, which the last scrub could miss
    after a line of another shape) come scrubbed on their own as well, so that last scrub finds
    nothing more in them.
    """
    return _scrubbed_lines(lines, redact, context)[1]


def _scrubbed_lines(
    lines: list[str], redact: Callable[[str], str], context: int
) -> tuple[list[str], list[str]]:
    """``lines[context:]`` as they will be shown, and as `redact_lines` returns them."""
    if redact is unredacted or not lines:
        return lines[context:], lines[context:]
    text = "\n".join(lines)
    scrubbed = redact(text)
    sent = lines if scrubbed == text else _realign(lines, scrubbed.split("\n"))
    orphan = next((i for i in range(len(sent) - 1, -1, -1) if _KEY_END.search(sent[i])), None)
    if orphan is not None:
        sent = [REDACTED] * (orphan + 1) + sent[orphan + 1 :]
    raw = lines[context:]
    alone = _each(raw, redact)
    shown = alone if sent is lines else _each(sent[context:], redact)
    # what the agent's last scrub finds in a line without its file's name before it
    bare = _each(raw, redact.redact) if isinstance(redact, _FileLines) else alone
    return shown, [
        line if seen == by_itself == plain else seen
        for line, seen, by_itself, plain in zip(raw, shown, alone, bare, strict=True)
    ]


def _each(lines: list[str], redact: Callable[[str], str]) -> list[str]:
    """Each of ``lines`` scrubbed on its own, as the agent scrubs a result's strings (as its
    file's lines, each right after the file's name, for `as_lines_of`'s)."""
    if isinstance(redact, _FileLines):
        return redact.each(lines)
    if any("\x00" in line for line in lines):
        return [redact(line) for line in lines]
    return redact("\x00".join(lines)).split("\x00")  # no rule crosses a NUL


def _realign(original: list[str], scrubbed: list[str]) -> list[str]:
    """``scrubbed`` (the lines of ``original``'s scrubbed text) one for one with ``original``.

    A redaction that swallowed line ends joined lines; the line it starts in keeps the
    redacted piece and each line it swallowed becomes "[REDACTED]". Every line returned
    is made of ``scrubbed`` alone, so a wrong guess at where a redaction ended can
    misplace a line, never show what was hidden.
    """
    if len(scrubbed) >= len(original):
        return [*scrubbed[: len(original) - 1], " ".join(scrubbed[len(original) - 1 :])]
    sent: list[str] = []
    i = 0
    for j, piece in enumerate(scrubbed):
        if piece == original[i] or i == len(original) - 1:
            sent.append(piece)
            i += 1
            continue
        spare = (len(original) - i) - (len(scrubbed) - j)  # line ends still to account for
        swallowed = next((s for s in range(spare + 1) if _ends_at(original, scrubbed, i + s, j)), 0)
        sent += [piece] + [REDACTED] * swallowed
        i += swallowed + 1
    return sent + [REDACTED] * (len(original) - len(sent))


def _ends_at(original: list[str], scrubbed: list[str], last: int, j: int) -> bool:
    """Could ``scrubbed[j]`` end with ``original[last]``, the next piece start the next line?"""
    if not original[last].endswith(scrubbed[j].rpartition(REDACTED)[2]):
        return False
    if j + 1 == len(scrubbed):
        return last + 1 == len(original)
    if last + 1 >= len(original):
        return False
    following = scrubbed[j + 1]
    return following == original[last + 1] or (
        REDACTED in following and original[last + 1].startswith(following.partition(REDACTED)[0])
    )


def head_lines(
    path: Path,
    count: int,
    contains: str | None = None,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    redact: Callable[[str], str] = unredacted,
) -> Lines:
    """The first ``count`` lines of ``path`` as they will be sent (matching ``contains``)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        judge = _Judge(count, contains, as_lines_of(path, redact))
        pending: list[str] = []  # the lines before the ones not judged yet (context), then those
        context = ready = scanned = 0
        for raw, scanned in _lines_forward(handle, max_scan_bytes):
            pending.append(decode_line(raw))
            judge.chars += len(pending[-1])
            ready += judge.could_keep(pending[-1])
            if judge.due(ready):
                if judge.judge(pending, context):
                    return Lines(judge.found, size, scanned, True)
                pending = pending[-CONTEXT_LINES:]
                context, ready = len(pending), 0
        judge.judge(pending, context)
        return Lines(judge.found, size, scanned, scanned < max_scan_bytes or scanned >= size)


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

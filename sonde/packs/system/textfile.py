"""Bounded reads of text files: the first or last N lines (the first N bytes: `fileread.read_text`).

Nothing here reads a whole file into memory. `tail_lines` walks back from the
end in blocks and stops after `max_scan_bytes`; `head_lines` reads forward
under the same cap. Both count lines as ``tail -n`` and ``head -n`` do, blank
ones included (the newline that ends the file does not start another). Both take
an optional literal ``contains`` filter, so the "last 100 lines that mention
'error'" of a large log costs at most the scan cap. `Limits` bound them further: the
lines stop once those kept would take more of the answer than its budget (``truncated``),
and a set ``stop`` flag (the probe gave up) ends the work at the next line (`abandon.Abandoned`).
A line is cut to `LINE_MAX_CHARS` before it is scrubbed (a value cut short at its end is
hidden to the end: `sonde.agent.scrub_shapes.CUT`) and comes as a `CutLine` counting what was
left out, sent scrubbed for `marked` to say so (scrubbing: `linescrub`'s). NUL bytes are read as
no text, a run of them as no line (`rawlines`). The readers return
each line sent with its raw line: a probe counts the redactions in what it sends (`count_sent`).

Opening goes through `open_regular`: the path (already resolved by
``ProbeContext.allowed_path``) is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must
be a regular file, so a FIFO or a device can never hang or flood a probe, and a
symlink swapped in after the allow-list check is refused.
"""

from __future__ import annotations

import math
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, BinaryIO

from pydantic import AfterValidator, BeforeValidator, Field

from sonde.packs.context import unredacted
from sonde.packs.executor import json_size
from sonde.packs.system.abandon import raise_if_given_up
from sonde.packs.system.access import why_refused
from sonde.packs.system.binary import refuse_binary_log
from sonde.packs.system.linescrub import (
    CutLine,
    as_lines_of,
    decode_line,
    marked,
    scrubbed_lines,
)
from sonde.packs.system.nofollow import open_resolved
from sonde.packs.system.rawlines import Skipped, lines_backwards, lines_forward
from sonde.packs.textpattern import PythonPattern

MAX_SCAN_BYTES = 16 * 1024 * 1024
# Lines scrubbed with the ones judged, before them: more than the YAML block scalar
# (201 lines) or the private key (~100 lines of RSA 8192) the scrubber hides whole.
CONTEXT_LINES = 256
BATCH_CHARS = 1024 * 1024  # lines judged (scrubbed as one text) at a time, at most about
BUDGET_STEP_CHARS = 64 * 1024  # lines judged at least at a time once the budget is nearly spent
NAME_MAX_BYTES = 255  # of one name in a path (Linux's NAME_MAX)
PATH_MAX_BYTES = 4095  # of a whole path (Linux's PATH_MAX, its NUL aside)


def absolute(value: object) -> object:
    """``value``, unless it is a text that is no absolute path: ValueError, saying so (the
    pattern's own message is a regular expression to decode)."""
    if isinstance(value, str) and not value.startswith("/"):
        raise ValueError("must be an absolute path, starting with '/'")
    return value


def fits_file_names(path: str) -> str:
    """``path`` if the file system can take it: raises ValueError for a name of more than
    `NAME_MAX_BYTES` (``open`` fails with ENAMETOOLONG) or a path of more than `PATH_MAX_BYTES`,
    saying so without repeating the path."""
    lengths = [len(part.encode("utf-8", "surrogatepass")) for part in path.split("/")]
    if max(lengths) > NAME_MAX_BYTES:
        raise ValueError(
            f"a name in the path is {max(lengths)} bytes long; a file name has at most {NAME_MAX_BYTES}"
        )
    if sum(lengths) + len(lengths) - 1 > PATH_MAX_BYTES:
        raise ValueError(
            f"the path is {sum(lengths) + len(lengths) - 1} bytes long; at most {PATH_MAX_BYTES}"
        )
    return path


# Checked by Python's re (`PythonPattern`): the Rust engine spends ~8 MiB on the {0,4095} repeat.
AbsolutePath = Annotated[
    str,
    Field(
        strict=True,
        description="Absolute path; must lie inside the agent's allowed paths (symlinks resolved).",
    ),
    PythonPattern(r"^/[^\x00-\x1f]{0,4095}$"),
    AfterValidator(fits_file_names),
    BeforeValidator(absolute),  # last: runs first, so a relative path is told so, not a pattern
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
    truncated: bool = False  # True when the budget stopped the lines before ``count``
    raw: list[str] = field(default_factory=list)  # each line as read, before it was scrubbed
    nul_bytes_skipped: int = 0  # read past as no text (`rawlines`)


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


def json_line_cost(line: str) -> int:
    """The bytes of a list in the answer that ``line`` takes: its JSON and a comma."""
    return json_size(line) + 1


@dataclass(frozen=True)
class Limits:
    """What bounds a line probe's work beyond its scan: the bytes of JSON its lines may take in the
    answer (None: no bound), the flag its probe sets when it gives up (checked line by line), and
    what a line sent costs of the budget (``cost``: the answer's bytes for it, as `marked`)."""

    budget_bytes: int | None = None
    stop: threading.Event | None = None
    cost: Callable[[str], int] = json_line_cost


NO_LIMITS = Limits()


def tail_lines(
    path: Path,
    count: int,
    contains: str | None = None,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    redact: Callable[[str], str] = unredacted,
    limits: Limits = NO_LIMITS,
) -> Lines:
    """The last ``count`` lines of ``path`` as they will be sent (matching ``contains``), oldest first.

    Lines are judged by `_Judge`, each with up to `CONTEXT_LINES` earlier lines
    read for context, so a secret that began before the lines returned is still hidden.
    Raises `Abandoned` once ``limits.stop`` is set.
    """
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        refuse_binary_log(handle, path, size, at_end=True)
        judge = _Judge(count, contains, as_lines_of(path, redact), limits)
        pending: list[str] = []  # decoded lines not judged yet, newest first
        scanned = [0]
        for raw, dropped in lines_backwards(handle, size, max_scan_bytes, scanned, judge.skipped):
            judge.read(decode_line(raw, dropped), pending)
            if len(pending) > CONTEXT_LINES:  # the next line to judge has `CONTEXT_LINES` before it
                if judge.ready(pending[-1 - CONTEXT_LINES]):
                    return judge.lines(size, scanned[0], True, newest_first=True)
                if judge.due():
                    judged = len(pending) - CONTEXT_LINES
                    if judge.judge(pending[::-1], CONTEXT_LINES, newest_first=True):
                        return judge.lines(size, scanned[0], True, newest_first=True)
                    del pending[:judged]
        judge.judge(pending[::-1], 0, newest_first=True)
        return judge.lines(size, scanned[0], scanned[0] >= size, newest_first=True)


class _Judge:
    """Which lines to keep, as they will be sent: ``found`` fills up to ``count``, or until its
    lines would take more than ``limits.budget_bytes`` of the answer (then ``truncated``).

    A batch of consecutive lines is scrubbed as ONE text (`redact_lines`) with the
    lines before it as context, so a key block or a YAML block scalar is hidden on
    every line it spans. ``contains`` must match the line before and after
    scrubbing, so a filter cannot confirm a guess at a secret the answer hides.
    Only the lines it could keep (matching before) are then scrubbed each on its own too.
    """

    def __init__(
        self, count: int, contains: str | None, redact: Callable[[str], str], limits: Limits
    ) -> None:
        self.count, self.contains, self.redact, self.stop = count, contains, redact, limits.stop
        self.budget = math.inf if limits.budget_bytes is None else limits.budget_bytes
        self.cost = limits.cost
        self.found: list[str] = []
        self.raw: list[str] = []  # the line read of each found
        self.skipped = Skipped()
        self.truncated = False
        self.chars = 0  # characters of the lines to judge (context aside) since the last judgement
        self.ready_lines = self.ready_chars = 0  # of those, the lines that could be kept

    def read(self, line: str, pending: list[str]) -> None:
        """Add ``line`` to ``pending``; raises `Abandoned` once the probe has given up."""
        raise_if_given_up(self.stop)
        pending.append(line)

    def ready(self, line: str) -> bool:
        """``line`` can be judged: count it if it could be kept. True (and ``truncated``) when, with
        no filter, it is the next line to send and cannot fit: nothing more to judge. (With a filter,
        only a judgement may say so: whether a line matches before it is scrubbed is no answer.)"""
        self.chars += len(line)
        if not self.could_keep(line):
            return False
        cost = len(line) + 3  # quotes and comma: no more than its bytes of JSON
        if self.contains is None and not self.ready_lines and cost > self.budget:
            self.truncated = True
            return True
        self.ready_lines += 1
        self.ready_chars += cost
        return False

    def could_keep(self, line: str) -> bool:
        return self.contains is None or self.contains in line

    def due(self) -> bool:
        """Judge now: the lines ready could fill ``found`` or the budget, or they are a full batch."""
        fill = max(self.budget, BUDGET_STEP_CHARS)  # not a batch a line while a filter drops them
        return (
            len(self.found) + self.ready_lines >= self.count
            or self.chars >= BATCH_CHARS
            or self.ready_chars >= fill
        )

    def judge(self, lines: list[str], context: int, newest_first: bool = False) -> bool:
        """Judge ``lines[context:]`` (file order; the first ``context`` only give context);
        True once ``count`` lines are found or the budget is spent. ``newest_first`` adds the newest first."""
        self.chars = self.ready_lines = self.ready_chars = 0
        context = min(context, len(lines))
        picked = [index for index in range(context, len(lines)) if self.could_keep(lines[index])]
        if not picked:
            return False
        shown, sent = scrubbed_lines(lines, self.redact, context, picked)
        for at in range(len(picked) - 1, -1, -1) if newest_first else range(len(picked)):
            raw = lines[picked[at]]
            if self.could_keep(shown[at]):
                kept = sent[at]
                if isinstance(raw, CutLine):  # scrubbed, for the marker to follow (`marked`)
                    kept = raw if shown[at] is raw else CutLine(shown[at], raw.omitted)
                if self._keep(raw, kept):
                    return True
        return False

    def _keep(self, raw: str, sent: str) -> bool:
        """Add ``sent`` to ``found``; True when no more is wanted (``count`` found, or the budget spent).
        A line is charged at least as if sent raw (a cut one is sent scrubbed): what judging it cost."""
        cost = max(self.cost(marked(sent)), self.cost(marked(raw)))
        if cost > self.budget:
            self.truncated = True
            return True
        self.budget -= cost
        self.found.append(sent)
        self.raw.append(raw)
        return len(self.found) >= self.count

    def lines(self, size: int, scanned: int, complete: bool, newest_first: bool = False) -> Lines:
        """The `Lines` found (oldest first: ``newest_first`` ones turned round)."""
        step = -1 if newest_first else 1
        return Lines(
            self.found[::step],
            size,
            scanned,
            complete,
            self.truncated,
            self.raw[::step],
            self.skipped.nul_bytes,
        )


def head_lines(
    path: Path,
    count: int,
    contains: str | None = None,
    max_scan_bytes: int = MAX_SCAN_BYTES,
    redact: Callable[[str], str] = unredacted,
    limits: Limits = NO_LIMITS,
) -> Lines:
    """The first ``count`` lines of ``path`` as they will be sent (matching ``contains``).

    Raises `Abandoned` once ``limits.stop`` is set."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        refuse_binary_log(handle, path, size, at_end=False)
        judge = _Judge(count, contains, as_lines_of(path, redact), limits)
        pending: list[str] = []  # the lines before the ones not judged yet (context), then those
        context, scanned = 0, [0]
        for raw, dropped in lines_forward(handle, max_scan_bytes, scanned, judge.skipped):
            judge.read(decode_line(raw, dropped), pending)
            if judge.ready(pending[-1]):
                return judge.lines(size, scanned[0], True)
            if judge.due():
                if judge.judge(pending, context):
                    return judge.lines(size, scanned[0], True)
                pending = pending[-CONTEXT_LINES:]
                context = len(pending)
        judge.judge(pending, context)
        return judge.lines(size, scanned[0], scanned[0] < max_scan_bytes or scanned[0] >= size)

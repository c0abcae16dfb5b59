"""The last or first lines of a log file inside the allowed paths."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from sonde.packs.base import Params, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.textfile import (
    MAX_SCAN_BYTES,
    AbsolutePath,
    Lines,
    LiteralFilter,
    head_lines,
    tail_lines,
)

LOG_LINES_MAX = 5000
LOG_GROUPS = Requirements(groups=("adm",))


class LogParams(Params):
    path: AbsolutePath
    lines: int = Field(default=100, ge=1, le=LOG_LINES_MAX, strict=True, description="How many lines.")
    contains: LiteralFilter | None = None


class LogLines(Result):
    path: str
    size_bytes: int
    lines: list[str]
    scanned_bytes: int
    complete: bool = Field(description="False when the 16 MiB scan cap stopped the search early.")


def log_lines(path: Path, found: Lines) -> LogLines:
    return LogLines(
        path=str(path),
        size_bytes=found.size_bytes,
        lines=found.lines,
        scanned_bytes=found.scanned_bytes,
        complete=found.complete,
    )


@PACK.probe(
    "system.logs.tail",
    """The last `lines` lines (oldest first; blank lines count, as with `tail -n`) of a log
    file inside the allowed paths, optionally only those containing a literal `contains`
    text; lines longer than 4096 characters are cut. At most 16 MiB from the end is
    scanned. Files under /var/log usually need the 'adm' group. Use it for 'what did the
    service log recently'.""",
    timeout_s=15,
    requires=LOG_GROUPS,
)
async def logs_tail(ctx: ProbeContext, params: LogParams) -> LogLines:
    path = ctx.allowed_path(params.path)
    found = await ctx.in_thread(tail_lines, path, params.lines, params.contains, MAX_SCAN_BYTES, ctx.redact)
    return log_lines(path, found).newest_last("lines")


@PACK.probe(
    "system.logs.head",
    """The first `lines` lines (blank lines count, as with `head -n`) of a log file inside
    the allowed paths, optionally only those containing a literal `contains` text (at most
    16 MiB scanned). Files under /var/log usually need the 'adm' group. Use it to see how a
    log (or a boot) started.""",
    timeout_s=15,
    requires=LOG_GROUPS,
)
async def logs_head(ctx: ProbeContext, params: LogParams) -> LogLines:
    path = ctx.allowed_path(params.path)
    found = await ctx.in_thread(head_lines, path, params.lines, params.contains, MAX_SCAN_BYTES, ctx.redact)
    return log_lines(path, found)

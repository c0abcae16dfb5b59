"""The last or first lines of a log file inside the allowed paths.

The work is bounded by what the answer can carry: lines are judged (scrubbed) only until
those kept would fill `loglines.LINES_BUDGET_BYTES` of it (then ``truncated``), and a probe
that gives up (its deadline, a cancel) sets a flag its thread checks line by line, so the
thread stops instead of running on past the deadline (`loglines.read_lines`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from sonde.packs.base import Params, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.system import PACK
from sonde.packs.system.linescrub import count_sent
from sonde.packs.system.loglines import ReadLines, read_lines
from sonde.packs.system.textfile import AbsolutePath, Lines, LiteralFilter, head_lines, tail_lines

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
    truncated: bool = Field(
        description="True when fewer lines than asked for are given because more would not fit in "
        "the answer (about 236 KiB of lines): the newest of a tail, the first of a head."
    )
    nul_bytes_skipped: int = Field(
        description="NUL bytes read past as no text, a run of them as no line: what a log truncated "
        "while it was written (logrotate's copytruncate) holds where its old text was."
    )

    @property
    def cut_to_fit(self) -> bool:
        """Whether the lines stopped at the answer's size cap (the agent reports it as truncated)."""
        return self.truncated


def log_lines(path: Path, found: Lines) -> LogLines:
    return LogLines(
        path=str(path),
        size_bytes=found.size_bytes,
        lines=found.lines,
        scanned_bytes=found.scanned_bytes,
        complete=found.complete,
        truncated=found.truncated,
        nul_bytes_skipped=found.nul_bytes_skipped,
    )


async def sent_lines(ctx: ProbeContext, read: ReadLines, path: Path, params: LogParams) -> Lines:
    """``read`` (`tail_lines`, `head_lines`) as `loglines.read_lines` bounds it, every line sent:
    the redactions made in them are counted with the probe's tally."""
    found = await read_lines(ctx, read, path, params.lines, params.contains)
    count_sent(ctx.redact, found.raw, found.lines)
    return found


@PACK.probe(
    "system.logs.tail",
    """The last `lines` lines (oldest first; blank lines count, as with `tail -n`) of a log
    file inside the allowed paths, optionally only those containing a literal `contains`
    text; lines longer than 4096 characters are cut (ending "… [line cut: N more characters]"),
    and only the newest that fit in about 236 KiB are given (`truncated` says so). At most
    16 MiB from the end is scanned; a binary file is refused. NUL bytes (a run of them where a log
    was truncated as it was written) are no text: `nul_bytes_skipped` counts them. Files under /var/log usually
    need the 'adm' group. Use it for 'what did the service log recently'.""",
    timeout_s=15,
    requires=LOG_GROUPS,
)
async def logs_tail(ctx: ProbeContext, params: LogParams) -> LogLines:
    path = ctx.allowed_path(params.path)
    found = await sent_lines(ctx, tail_lines, path, params)
    return log_lines(path, found).newest_last("lines")


@PACK.probe(
    "system.logs.head",
    """The first `lines` lines (blank lines count, as with `head -n`) of a log file inside
    the allowed paths, optionally only those containing a literal `contains` text (at most
    16 MiB scanned); lines longer than 4096 characters are cut (ending "… [line cut: N more
    characters]"), and only the first that fit in about 236 KiB are given (`truncated` says
    so); a binary file is refused. NUL bytes (a run of them where a log was truncated as it was
    written) are no text: `nul_bytes_skipped` counts them. Files under /var/log usually need the
    'adm' group. Use it to see how a log (or a boot) started.""",
    timeout_s=15,
    requires=LOG_GROUPS,
)
async def logs_head(ctx: ProbeContext, params: LogParams) -> LogLines:
    path = ctx.allowed_path(params.path)
    found = await sent_lines(ctx, head_lines, path, params)
    return log_lines(path, found)

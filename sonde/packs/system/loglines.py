"""A log probe's lines, read in a worker thread within what its answer can carry.

The work is bounded by the answer: lines are judged (scrubbed) only until those kept would
fill `LINES_BUDGET_BYTES` of it, each costing what the probe's answer spends on it (the
line itself for `system.logs.*`, its parsed entry for nginx's), then ``truncated``. A probe
that gives up (its deadline, a cancel) sets a flag its thread checks line by line, so the
thread stops instead of running on past the deadline (`abandon`).

No probes here: the system pack's log probes and other packs' (nginx) share it without
importing each other's probe modules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from sonde.packs.context import ProbeContext
from sonde.packs.executor import DEFAULT_MAX_RESULT_BYTES
from sonde.packs.system.abandon import in_thread_until_given_up
from sonde.packs.system.linescrub import marked
from sonde.packs.system.textfile import MAX_SCAN_BYTES, Limits, Lines, json_line_cost

# The lines' share of the answer's size cap: the rest is room for the path and the counts.
LINES_BUDGET_BYTES = DEFAULT_MAX_RESULT_BYTES - 20 * 1024
ReadLines = Callable[[Path, int, "str | None", int, Callable[[str], str], Limits], Lines]


async def read_lines(
    ctx: ProbeContext,
    read: ReadLines,
    path: Path,
    count: int,
    contains: str | None = None,
    *,
    cost: Callable[[str], int] = json_line_cost,
    budget_bytes: int | None = LINES_BUDGET_BYTES,
    redact: Callable[[str], str] | None = None,
) -> Lines:
    """``read`` (`tail_lines`, `head_lines`) of ``path`` in a worker thread, as sent: scrubbed with
    ``redact`` (``ctx.redact`` unless given), a cut line `marked`; no more than ``budget_bytes`` of
    the answer as ``cost`` counts a line sent. When this probe gives up (cancelled at its deadline
    or by its caller) the thread stops at its next line instead of running on. The redactions made
    are not counted here: the probe counts those in what it sends (`linescrub.count_sent`)."""
    scrub = ctx.redact if redact is None else redact
    found = await in_thread_until_given_up(
        ctx, read_within, read, path, count, contains, scrub, budget_bytes, cost
    )
    return replace(found, lines=[marked(line) for line in found.lines])


def read_within(
    read: ReadLines,
    path: Path,
    count: int,
    contains: str | None,
    scrub: Callable[[str], str],
    budget_bytes: int | None,
    cost: Callable[[str], int],
    stop: threading.Event,
) -> Lines:
    """``read`` within the answer's budget, stopping once ``stop`` is set (`abandon`)."""
    return read(path, count, contains, MAX_SCAN_BYTES, scrub, Limits(budget_bytes, stop, cost))

"""nginx probes: error log, access log and a status summary.

The log probes read as `system.logs.tail` does (`loglines.read_lines`): lines only until what
the answer spends on them, their parsed entries, would fill its budget (then ``truncated``),
stopping when the probe gives up. Each line costs at least its own size, so the work stays
bounded however few entries are listed.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import Field

from sonde.packs.base import Params, Result
from sonde.packs.context import ProbeContext, unredacted
from sonde.packs.executor import json_size
from sonde.packs.nginx import PACK
from sonde.packs.nginx.logformat import (
    ERROR_LEVELS,
    judge_errors,
    parse_access_line,
    parse_error_line,
    summarize_access,
)
from sonde.packs.system.linescrub import count_sent
from sonde.packs.system.loglines import read_lines
from sonde.packs.system.textfile import AbsolutePath, tail_lines

DEFAULT_ACCESS_LOG = "/var/log/nginx/access.log"
DEFAULT_ERROR_LOG = "/var/log/nginx/error.log"
UNPARSED_LINES_MAX = 20  # access log lines in another format, sent raw
RECENT_MINUTES = 15  # what counts as "now" in a log: the runbook judges only these entries
RECENT = Field(
    default=RECENT_MINUTES,
    ge=1,
    le=10_080,
    strict=True,
    description="Count only entries of the last N minutes (null: all the lines read); older ones are counted in `old`.",
)
Parse = Callable[[str], object | None]


def log_path(ctx: ProbeContext, given: str | None, key: str, default: str) -> Path:
    configured = ctx.settings.for_pack("nginx").get(key)
    return ctx.allowed_path(given or (str(configured) if configured else default))


def since(minutes: int | None, now: datetime.datetime) -> datetime.datetime | None:
    return None if minutes is None else now - datetime.timedelta(minutes=minutes)


def age_s(last_time: str | None, now: datetime.datetime) -> int | None:
    """Seconds from ``last_time`` (ISO 8601, aware or naive as ``now``) to ``now``."""
    return (
        None if last_time is None else int((now - datetime.datetime.fromisoformat(last_time)).total_seconds())
    )


def entry_cost(parse: Parse, line: str) -> int:
    """The bytes of the answer a log line takes: its entry's JSON (``parse``), or the line's own when
    it has none or that is more (what judging it cost), and a comma."""
    entry = parse(line)
    return max(json_size(line), json_size(vars(entry)) if entry is not None else 0) + 1


def sent_text(line: str, entry: object | None) -> str:
    """What the answer holds of ``line``: its parsed ``entry``'s JSON, else the line."""
    return line if entry is None else json.dumps(vars(entry), ensure_ascii=False)


def as_sent(parse: Parse, raw: str, line: str, entry: object | None) -> tuple[str, str]:
    """What the answer holds of ``line`` (``entry``, parsed from it: `sent_text`) and the same of its
    ``raw`` line (before it was scrubbed): `count_sent` counts the redactions the probe made in the
    first."""
    return sent_text(raw, parse(raw)), sent_text(line, entry)


def count_in_sent(ctx: ProbeContext, pairs: list[tuple[str, str]]) -> None:
    """Count with the probe's tally the redactions it made in what it sends (``pairs`` of `as_sent`)."""
    count_sent(ctx.redact, [raw for raw, _ in pairs], [sent for _, sent in pairs])


class LogParams(Params):
    path: AbsolutePath | None = Field(default=None, description="Log file; default from the agent config.")
    lines: int = Field(default=100, ge=1, le=2000, strict=True, description="The last N lines.")


class ErrorLogParams(LogParams):
    min_level: Literal["debug", "info", "notice", "warn", "error", "crit", "alert", "emerg"] = "warn"
    recent_minutes: int | None = RECENT


class ErrorLogEntry(Result):
    time: str
    level: str
    pid: int
    connection: int | None
    message: str
    client: str | None
    request: str | None
    upstream: str | None


TRUNCATED_LINES = (
    "True when fewer lines than asked for were read because their entries would not fit in the "
    "answer (about 236 KiB): the newest are read."
)


class UpstreamErrorCount(Result):
    error: str
    upstream: str | None
    count: int


class RecentErrors(Result):
    minutes: int | None
    counts_by_level: dict[str, int]
    missing_files: int = Field(
        description='[error] lines `open() "..." failed (2: No such file or directory)`: requests for missing files (404s).'
    )
    upstream_errors: list[UpstreamErrorCount]
    old: int = Field(description="Entries read that are older than the window: not counted.")


class ErrorLog(Result):
    path: str
    counts_by_level: dict[str, int]
    recent: RecentErrors
    first_time: str | None
    last_time: str | None
    last_age_s: int | None = Field(description="Seconds since the newest entry (the server's local time).")
    entries: list[ErrorLogEntry]
    unparsed: int
    truncated: bool = Field(description=TRUNCATED_LINES)

    @property
    def cut_to_fit(self) -> bool:
        """Whether the lines stopped at the answer's size cap (the agent reports it as truncated)."""
        return self.truncated


@PACK.probe(
    "nginx.logs.error",
    """The last `lines` lines of nginx's error log (allowed paths only), parsed: time (server
    local time), level, worker PID, connection, message, and the client, request and
    upstream it names; entries below `min_level` are counted but not listed. `recent` counts
    the entries of the last `recent_minutes` only: by level, the missing files (404s nginx
    logs at [error]) and the upstream errors by kind; `last_age_s` says how old the newest
    entry is. Only the newest
    lines whose entries fit in about 236 KiB are read (`truncated` says so); a line longer
    than 4096 characters is cut, a value it cuts ending "… [line cut: N more characters]".
    Use it for 'why does nginx answer 502' (upstream refused, timed out) or failing reloads.""",
    timeout_s=15,
)
async def error_log(ctx: ProbeContext, params: ErrorLogParams) -> ErrorLog:
    path = log_path(ctx, params.path, "error_log", DEFAULT_ERROR_LOG)
    found = await read_lines(ctx, tail_lines, path, params.lines, cost=partial(entry_cost, parse_error_line))
    parsed = [parse_error_line(line) for line in found.lines]
    listed = ERROR_LEVELS[ERROR_LEVELS.index(params.min_level) :]
    entries = [entry for entry in parsed if entry is not None]
    now = datetime.datetime.now()  # nginx logs its local time, with no zone
    recent = judge_errors(entries, since(params.recent_minutes, now))
    count_in_sent(
        ctx,
        [
            as_sent(parse_error_line, raw, line, entry)
            for raw, line, entry in zip(found.raw, found.lines, parsed, strict=True)
            if entry is not None and entry.level in listed
        ],
    )
    return ErrorLog(
        path=str(path),
        counts_by_level={level: sum(1 for e in entries if e.level == level) for level in ERROR_LEVELS},
        recent=RecentErrors(
            minutes=params.recent_minutes,
            counts_by_level=recent.counts_by_level,
            missing_files=recent.missing_files,
            upstream_errors=[
                UpstreamErrorCount(error=error, upstream=upstream, count=count)
                for error, upstream, count in recent.upstream_errors
            ],
            old=recent.old,
        ),
        first_time=recent.first_time,
        last_time=recent.last_time,
        last_age_s=age_s(recent.last_time, now),
        entries=[ErrorLogEntry(**vars(e)) for e in entries if e.level in listed],
        unparsed=len(parsed) - len(entries),
        truncated=found.truncated,
    ).newest_last("entries")


class AccessLogEntry(Result):
    address: str
    time: str | None
    method: str | None
    path: str | None
    status: int
    bytes_sent: int
    user_agent: str | None


class AccessLog(Result):
    path: str
    entries: list[AccessLogEntry]
    unparsed_lines: list[str]
    truncated: bool = Field(description=TRUNCATED_LINES)

    @property
    def cut_to_fit(self) -> bool:
        """Whether the lines stopped at the answer's size cap (the agent reports it as truncated)."""
        return self.truncated


@PACK.probe(
    "nginx.logs.access",
    """The last `lines` requests of nginx's access log (combined or common format, allowed
    paths only): client address, time (ISO 8601 UTC), method, path without query string,
    status, bytes sent and user agent. Lines in another format are returned raw (at most
    20); a line longer than 4096 characters is cut, ending "… [line cut: N more
    characters]". Only the newest lines whose entries fit in about 236 KiB are read
    (`truncated` says so).""",
    timeout_s=15,
)
async def access_log(ctx: ProbeContext, params: LogParams) -> AccessLog:
    path = log_path(ctx, params.path, "access_log", DEFAULT_ACCESS_LOG)
    found = await read_lines(ctx, tail_lines, path, params.lines, cost=partial(entry_cost, parse_access_line))
    entries: list[AccessLogEntry] = []
    unparsed: list[str] = []
    sent: list[tuple[str, str]] = []
    for raw, line in zip(found.raw, found.lines, strict=True):
        entry = parse_access_line(line)
        if entry is None and len(unparsed) == UNPARSED_LINES_MAX:
            continue  # not sent
        if entry is None:
            unparsed.append(line)
        else:
            entries.append(AccessLogEntry(**vars(entry)))
        sent.append(as_sent(parse_access_line, raw, line, entry))
    count_in_sent(ctx, sent)
    return AccessLog(
        path=str(path), entries=entries, unparsed_lines=unparsed, truncated=found.truncated
    ).newest_last("entries")


class SummaryParams(Params):
    path: AbsolutePath | None = Field(default=None, description="Access log; default from the agent config.")
    lines: int = Field(default=1000, ge=1, le=100_000, strict=True, description="Summarize the last N lines.")
    top: int = Field(default=10, ge=1, le=50, strict=True, description="How many top paths and clients.")
    recent_minutes: int | None = RECENT


class PathCount(Result):
    path: str
    requests: int
    server_errors: int


class ClientCount(Result):
    address: str
    requests: int


class StatusSummary(Result):
    path: str
    lines: int
    requests: int
    unparsed: int
    by_status_class: dict[str, int]
    server_error_percent: float | None
    client_error_percent: float | None
    bytes_sent: int
    first_time: str | None
    last_time: str | None
    last_age_s: int | None = Field(description="Seconds since the newest entry.")
    recent_minutes: int | None
    old: int = Field(description="Requests read that are older than the window: not counted.")
    top_paths: list[PathCount]
    top_clients: list[ClientCount]
    complete: bool


@PACK.probe(
    "nginx.status.summary",
    """Traffic over those of the last `lines` requests of the access log made in the last
    `recent_minutes` (null: all; older ones are counted in `old`): requests by status class
    (1xx-5xx), the share of 5xx and 4xx in percent, bytes sent, the top paths (with their
    5xx count) and the top clients; the time span of every request read and `last_age_s`,
    how old the newest is. Use it for 'is nginx serving errors', 'what is hammering this
    server'.""",
    timeout_s=20,
)
async def status_summary(ctx: ProbeContext, params: SummaryParams) -> StatusSummary:
    path = log_path(ctx, params.path, "access_log", DEFAULT_ACCESS_LOG)
    # nothing of a line is sent but what the summary counts: no budget, nor scrub but the answer's
    found = await read_lines(ctx, tail_lines, path, params.lines, budget_bytes=None, redact=unredacted)
    now = datetime.datetime.now(datetime.UTC)
    summary = await ctx.in_thread(
        summarize_access, found.lines, params.top, since(params.recent_minutes, now)
    )
    return StatusSummary(
        path=str(path),
        lines=summary.lines,
        requests=summary.requests,
        unparsed=summary.unparsed,
        by_status_class=summary.by_status_class,
        server_error_percent=summary.server_error_percent,
        client_error_percent=summary.client_error_percent,
        bytes_sent=summary.bytes_sent,
        first_time=summary.first_time,
        last_time=summary.last_time,
        last_age_s=age_s(summary.last_time, now),
        recent_minutes=params.recent_minutes,
        old=summary.old,
        top_paths=[PathCount(path=p, requests=n, server_errors=e) for p, n, e in summary.top_paths],
        top_clients=[ClientCount(address=a, requests=n) for a, n in summary.top_clients],
        complete=found.complete,
    )

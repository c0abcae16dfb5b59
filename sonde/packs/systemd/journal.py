"""The systemd journal: one query with unit, priority, time, text and transport filters.

``journalctl -o json`` prints one JSON object per entry. Every value is a string,
except a MESSAGE that is not valid UTF-8, which comes as a list of byte values
(and a field repeated in one entry comes as a list of those). Timestamps are
microseconds since the epoch (``__REALTIME_TIMESTAMP``).

"The last N" is ``--lines=N --reverse``: newest first, so when the output is cut
at its size cap the oldest entries are the ones lost; they are put back in time
order after parsing. "The first N" has no portable flag, so the output is cut
after enough bytes and the first N entries kept.

journalctl 243 and later exit with status 1 when ``--grep`` matches nothing
(systemd PR #12581), printing nothing or "-- No entries --": an empty answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from sonde.packs.base import Params, ProbeUnavailable, Requirements, Result
from sonde.packs.context import ProbeContext
from sonde.packs.process import CommandOutput
from sonde.packs.system.info import iso_utc
from sonde.packs.systemd import PACK, require_systemd
from sonde.packs.systemd.timespec import TIME_PATTERN, checked_time
from sonde.packs.systemd.units import UnitName
from sonde.packs.textpattern import PythonPattern

Priority = Literal["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
PRIORITIES: tuple[Priority, ...] = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
Transport = Literal["audit", "driver", "syslog", "journal", "stdout", "kernel"]
TIME_DESCRIPTION = (
    "'2024-05-01 10:00' (the machine's time zone, or with ' UTC'), 'today', 'yesterday', 'now', "
    "'-1h' or '2 days ago' (units s, min, h, d, w), from 1970 on."
)
# checked by journalctl's rules (`checked_time`), not by the pattern alone: '2026-13-45' and
# '-21000d' (before 1970) fit any pattern short of a calendar
TimeSpec = Annotated[
    str,
    Field(strict=True),
    AfterValidator(checked_time),
    WithJsonSchema({"type": "string", "pattern": TIME_PATTERN, "description": TIME_DESCRIPTION}),
]
OUTPUT_FIELDS = "MESSAGE,PRIORITY,_SYSTEMD_UNIT,SYSLOG_IDENTIFIER,_PID,_COMM,_TRANSPORT,_AUDIT_TYPE_NAME"
MESSAGE_MAX_CHARS = 2000
BYTES_PER_ENTRY = 16 * 1024
JOURNAL_MAX_BYTES = 8 * 1024 * 1024
PARTIAL_VIEW_HINT = "not seeing messages from other users"
NO_ENTRIES = "-- No entries --"
GROUP_NOTE = "only this user's own entries are visible: add the sonde user to the 'systemd-journal' group"


class JournalParams(Params):
    unit: UnitName | None = None
    priority: Priority | None = Field(default=None, description="This priority and more severe.")
    since: TimeSpec | None = None
    until: TimeSpec | None = None
    grep: Annotated[str, PythonPattern(r"^[^\x00-\x1f]{1,200}$")] | None = Field(
        default=None,
        strict=True,
        description="Regex on MESSAGE (PCRE2). An entry with a secret the agent redacts is kept only "
        "when `grep` is a plain text (no regex syntax) its redacted message still contains.",
    )
    transport: Transport | None = Field(default=None, description="e.g. 'audit' for the audit log.")
    lines: int = Field(default=100, ge=1, le=2000, strict=True, description="How many entries.")
    direction: Literal["last", "first"] = "last"


class JournalEntry(Result):
    time: str | None  # None when __REALTIME_TIMESTAMP is no date (past the year 9999, or garbled)
    priority: Priority | None
    unit: str | None
    identifier: str | None
    pid: int | None
    transport: str | None
    audit_type: str | None
    message: str


class JournalEntries(Result):
    entries: list[JournalEntry]
    truncated: bool
    note: str | None


def _text(value: Any) -> str | None:
    """A journal field value as text: strings as they are, byte lists decoded, repeats joined."""
    if value is None:
        return None
    if isinstance(value, list):
        if all(isinstance(item, int) for item in value):
            return bytes(value).decode("utf-8", errors="replace")
        return "\n".join(filter(None, (_text(item) for item in value)))
    return str(value)


def realtime(value: Any) -> str | None:
    """An entry's ``__REALTIME_TIMESTAMP`` (microseconds since the epoch, as text) as ISO 8601 UTC;
    None when it is not one or no date can say it (journal-remote keeps the sender's clock)."""
    text = _text(value)
    return iso_utc(int(text) / 1e6) if text and text.isdigit() and len(text) <= 20 else None


def journal_entry(raw: dict[str, Any]) -> JournalEntry:
    priority = _text(raw.get("PRIORITY"))
    pid = _text(raw.get("_PID"))
    message = _text(raw.get("MESSAGE")) or ""
    return JournalEntry(
        time=realtime(raw.get("__REALTIME_TIMESTAMP")),
        priority=PRIORITIES[int(priority)] if priority and priority.isdigit() and int(priority) < 8 else None,
        unit=_text(raw.get("_SYSTEMD_UNIT")),
        identifier=_text(raw.get("SYSLOG_IDENTIFIER")) or _text(raw.get("_COMM")),
        pid=int(pid) if pid and pid.isdigit() else None,
        transport=_text(raw.get("_TRANSPORT")),
        audit_type=_text(raw.get("_AUDIT_TYPE_NAME")),
        message=message if len(message) <= MESSAGE_MAX_CHARS else message[: MESSAGE_MAX_CHARS - 1] + "…",
    )


def parse_journal(
    text: str,
    keep: int,
    direction: Literal["last", "first"],
    wanted: Callable[[str], bool] | None = None,
    newest_first: bool = False,
) -> tuple[list[JournalEntry], bool]:
    """``journalctl -o json`` lines as entries, oldest first; an incomplete last line (cut output)
    is dropped. ``newest_first`` says ``text`` came from ``--reverse``.

    ``wanted`` sees each whole message (before it is cut to size) and drops those it refuses.
    """
    entries = []
    for line in text.splitlines():
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        if wanted is not None and not wanted(_text(raw.get("MESSAGE")) or ""):
            continue
        entries.append(journal_entry(raw))
    if newest_first:
        entries.reverse()
    more = len(entries) > keep
    return (entries[:keep] if direction == "first" else entries[-keep:]), more


REGEX_SYNTAX = re.compile(r"[\\.^$|?*+()\[\]{}]")  # any of these: not a plain literal


def grep_survives(grep: str, redact: Callable[[str], str]) -> Callable[[str], bool]:
    """Whether a message journalctl's ``--grep`` matched still matches as it will be sent.

    journalctl matches the raw message; a match that needs a secret the answer
    redacts would confirm a caller's guess at it, so such an entry is dropped.
    A message with nothing to redact is kept as journalctl matched it. One with
    redactions is kept only when ``grep`` is a plain literal (no regex syntax)
    that the redacted text still contains, with journalctl's rule that an
    all-lowercase pattern ignores case. The agent never runs a caller's regex
    itself: in a backtracking engine a pattern can take exponential time (one
    built to match at once in PCRE2 and backtrack in Python's ``re`` froze the
    agent), and a literal check is linear.
    """
    literal = None if REGEX_SYNTAX.search(grep) else grep
    any_case = grep == grep.lower()

    def survives(message: str) -> bool:
        sent = redact(message)
        if sent == message:
            return True
        if literal is None:
            return False
        return literal in (sent.lower() if any_case else sent)

    return survives


def journal_argv(params: JournalParams) -> list[str]:
    argv = ["journalctl", "--no-pager", "--output=json", f"--output-fields={OUTPUT_FIELDS}"]
    if params.direction == "last":
        argv += [f"--lines={params.lines}", "--reverse"]
    for flag, value in (
        ("--unit", params.unit),
        ("--priority", params.priority),
        ("--since", params.since),
        ("--until", params.until),
        ("--grep", params.grep),
    ):
        if value is not None:
            argv.append(f"{flag}={value}")
    if params.transport is not None:
        argv += ["--", f"_TRANSPORT={params.transport}"]
    return argv


def grep_matched_nothing(output: CommandOutput) -> bool:
    """journalctl 243+ exits 1 when ``--grep`` matches no entry, with nothing to show for it."""
    quiet = output.stderr.strip() in ("", NO_ENTRIES) or PARTIAL_VIEW_HINT in output.stderr
    return output.returncode == 1 and output.stdout.strip() in ("", NO_ENTRIES) and quiet


def journal_failure(output: CommandOutput) -> Exception:
    """The error for a journalctl that exited non-zero: what it said, or at least its exit status."""
    if "insufficient permissions" in output.stderr:
        return PermissionError(
            "no journal file may be read: add the sonde user to the 'systemd-journal' group"
        )
    said = output.stderr.strip()[:300]
    return ProbeUnavailable(
        f"journalctl failed (exit status {output.returncode})"
        + (f": {said}" if said else ", with nothing on stderr")
    )


@PACK.probe(
    "systemd.journal.query",
    """Entries of the systemd journal, filtered by `unit`, `priority` (and more severe),
    `since`/`until`, a `grep` regex on the message and `transport` ('audit' gives the
    audit log, 'kernel' kernel messages), the `last` (default) or `first` N: time (ISO 8601
    UTC), priority, unit, identifier, PID, transport, audit record type and message, oldest
    first. `truncated` when more entries matched than were returned (with `last`, the newest
    are the ones kept). Reading other users' and system entries needs the 'systemd-journal'
    group.""",
    timeout_s=20,
    requires=Requirements(commands=("journalctl",), groups=("systemd-journal",)),
)
async def journal_query(ctx: ProbeContext, params: JournalParams) -> JournalEntries:
    require_systemd()
    cap = min(params.lines * BYTES_PER_ENTRY, JOURNAL_MAX_BYTES)
    output = await ctx.run(journal_argv(params), max_output_bytes=cap)
    note = GROUP_NOTE if PARTIAL_VIEW_HINT in output.stderr else None
    if params.grep is not None and grep_matched_nothing(output):
        return JournalEntries(entries=[], truncated=False, note=note)
    if output.returncode != 0 and not output.truncated:
        raise journal_failure(output)
    wanted = grep_survives(params.grep, ctx.redact) if params.grep is not None else None
    # up to 8 MiB of JSON, each message redacted with a grep: a worker thread's job, not the event loop's
    entries, more = await ctx.in_thread(
        partial(parse_journal, newest_first=params.direction == "last"),
        output.stdout,
        params.lines,
        params.direction,
        wanted,
    )
    answer = JournalEntries(entries=entries, truncated=more or output.truncated, note=note)
    return answer.newest_last("entries") if params.direction == "last" else answer

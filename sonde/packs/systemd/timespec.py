"""The `since` / `until` times of `systemd.journal.query`: exactly those journalctl takes.

journalctl (`parse_timestamp` in systemd's time-util.c, checked against systemd
252) reads, among the forms our description promises: ``YYYY-MM-DD[ HH:MM[:SS]]``
with an optional `` UTC`` (else the machine's time zone), each field within
strptime's range (a 31 February is taken, and rolls over; a month 13 is not);
``today``, ``yesterday``, ``now``; and a relative time either ``-N UNIT`` or
``N UNIT ago``, never both and never bare (``5min`` is refused). Whatever it
resolves to must lie between the epoch and 9999-12-30 23:59:59 UTC, so
``-21000d`` (before 1970) is refused too. A time it would refuse is a
validation error naming the parameter here, not "journalctl failed" later.
"""

from __future__ import annotations

import calendar
import re
import time

from sonde.echo import echoed

UNITS = r"(s|sec|seconds?|min|minutes?|m|h|hours?|d|days?|w|weeks?)"
TIME_PATTERN = (
    r"^(\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?( UTC)?|today|yesterday|now"
    rf"|-\d{{1,5}} ?{UNITS}|\d{{1,5}} ?{UNITS} ago)$"
)
DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?: (\d{2}):(\d{2})(?::(\d{2}))?)?( UTC)?")
RELATIVE = re.compile(rf"-?(\d{{1,5}}) ?{UNITS}(?: ago)?")
UNIT_S = {
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400),
}
LAST_TIME_S = 253_402_214_399  # 9999-12-30 23:59:59 UTC, journalctl's last (USEC_TIMESTAMP_FORMATTABLE_MAX)
FIELD_MAX = (12, 31, 23, 59, 61)  # month, day, hour, minute, second: strptime's ranges
TIME_FORMS = (
    "'YYYY-MM-DD[ HH:MM[:SS]][ UTC]', 'today', 'yesterday', 'now', '-N UNIT' or 'N UNIT ago' "
    "(UNIT s, min, h, d, w)"
)
SHOWN_CHARS = 24  # so that a message, forms and all, fits the 200 characters a probe's error keeps


def date_seconds(match: re.Match[str]) -> float | None:
    """The epoch time of a `DATE` match, in UTC or the machine's time zone; None for a field
    out of its range (month 00 or 13, hour 24, ...)."""
    year, month, day, hour, minute, second = (int(value) if value else 0 for value in match.groups()[:6])
    fields = (month, day, hour, minute, second)
    if month < 1 or day < 1 or any(value > most for value, most in zip(fields, FIELD_MAX, strict=True)):
        return None
    try:
        if match[7]:  # ' UTC'
            return calendar.timegm((year, month, day, hour, minute, second))
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))  # rolls 31 Feb over
    except (OverflowError, ValueError):
        return None


def time_problem(text: str, now: float) -> str | None:
    """Why journalctl would refuse ``text`` as --since or --until at ``now``; None if it takes it."""
    shown = echoed(text) if len(text) <= SHOWN_CHARS else "this value"
    if re.fullmatch(TIME_PATTERN, text) is None:
        return f"{shown} is not a time journalctl takes: use {TIME_FORMS}"
    if text in ("today", "yesterday", "now"):
        return None
    date = DATE.fullmatch(text)
    if date is None:
        relative = RELATIVE.fullmatch(text)
        assert relative is not None  # the pattern's last two forms
        back_s = int(relative[1]) * UNIT_S[relative[2]]
        if now - back_s < 0:
            return f"{shown} reaches back before 1970, which journalctl refuses: at most {int(now // 86400)} days"
        return None
    seconds = date_seconds(date)
    if seconds is None:
        return (
            f"{shown} is no date journalctl takes: month 01-12, day 01-31, hour 00-23, minute 00-59, "
            "second 00-61"
        )
    if not 0 <= seconds <= LAST_TIME_S:
        return f"{shown} is outside the times journalctl takes: 1970-01-01 to 9999-12-30"
    return None


def checked_time(text: str) -> str:
    """``text`` when journalctl takes it as a time (see above); ValueError saying why not."""
    problem = time_problem(text, time.time())
    if problem is not None:
        raise ValueError(problem)
    return text

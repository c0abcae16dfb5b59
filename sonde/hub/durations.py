"""Durations as people type them on a command line or in a query: ``"90s"``, ``"15m"``, ``"2h"``,
``"1d"`` or bare seconds (a token's lifetime, an audit age, a log query's ``since``)."""

from __future__ import annotations

import re

from sonde.echo import echoed

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_DURATION_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

# 100000 days (about 273 years): past any TTL or age worth asking for, and past the
# 5-digit day counts query_logs' `since` admits; a bigger one overflows a timestamp
MAX_DURATION_S = 100_000 * 86400.0


def parse_duration(text: str) -> float:
    """Seconds in ``"90s"``, ``"15m"``, ``"2h"``, ``"1d"`` or a bare number of seconds, at most
    `MAX_DURATION_S`.

    Raises ValueError otherwise.
    """
    shown = echoed(text)
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None and _DURATION_RE.fullmatch(text.strip().removeprefix("-")):
        raise ValueError(f"invalid duration {shown}: a duration cannot be negative")
    if match is None:
        raise ValueError(f"invalid duration {shown}: use seconds or a number with s, m, h or d (e.g. 15m)")
    seconds = float(match[1]) * _DURATION_UNIT_S[match[2]]
    if seconds > MAX_DURATION_S:
        raise ValueError(f"duration {shown} is too long: at most 100000d (about 273 years)")
    return seconds


def read_as_seconds(
    text: str, meant: str = "d", lowest_s: float = 86400.0, highest_s: float = MAX_DURATION_S
) -> str:
    """For a refusal of ``text``: when it is a bare number that, in the unit ``meant``, would be
    between ``lowest_s`` and ``highest_s`` seconds (``180`` for an age of at least a day: ``180d``),
    that it was read as seconds and what it likely meant (``, read as seconds: did you mean 180d?``);
    else nothing."""
    number = text.strip()
    match = _DURATION_RE.fullmatch(number)
    if match is None or match[2] or not lowest_s <= float(match[1]) * _DURATION_UNIT_S[meant] <= highest_s:
        return ""
    return f", read as seconds: did you mean {number}{meant}?"

"""The log levels every Sonde command takes (``--log-level``, ``SONDE_LOG_LEVEL``): hub, agent, bridge;
and the text line their logs share."""

from __future__ import annotations

import logging
import time

from sonde.echo import echoed

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def checked_log_level(text: str) -> str:
    """``text`` as one of `LOG_LEVELS` (any case is fine); ValueError, naming the choices, otherwise."""
    level = text.upper()
    if level not in LOG_LEVELS:
        raise ValueError(
            f"--log-level (or SONDE_LOG_LEVEL) {echoed(text)} is not a log level: use "
            f"{', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}"
        )
    return level


class TextFormatter(logging.Formatter):
    """``2026-11-25 23:44:38,351 +0100 WARNING sonde.hub.core: ...``: local time with its UTC
    offset, so lines from machines in different zones (a hub and its agents) can be put side
    by side; the JSON format and every CLI, REST and MCP time are UTC already."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        local = time.localtime(record.created)
        return (
            f"{time.strftime('%Y-%m-%d %H:%M:%S', local)},{int(record.msecs):03d} "
            f"{time.strftime('%z', local)}"
        )

"""The log levels every Sonde command takes (``--log-level``, ``SONDE_LOG_LEVEL``): hub, agent, bridge."""

from __future__ import annotations

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

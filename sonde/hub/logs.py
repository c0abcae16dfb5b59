"""Logging for the hub and agent: text or JSON lines on stderr.

Called after the mcp SDK is imported and built (it configures root logging
in places), with ``force=True`` so our settings win.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def checked_log_level(text: str) -> str:
    """``text`` as one of `LOG_LEVELS` (any case is fine); ValueError, naming the choices, otherwise."""
    level = text.upper()
    if level not in LOG_LEVELS:
        shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
        raise ValueError(
            f"--log-level (or SONDE_LOG_LEVEL) {shown} is not a log level: use {', '.join(LOG_LEVELS[:-1])} "
            f"or {LOG_LEVELS[-1]}"
        )
    return level


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for noisy in ("hypercorn.access", "mcp.server.streamable_http", "mcp.server.streamable_http_manager"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))

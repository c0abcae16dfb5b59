"""Logging for the hub and agent: text or JSON lines on stderr.

Called after the mcp SDK is imported and built (it configures root logging
in places), with ``force=True`` so our settings win.

With ``--log-format json`` every line on the hub's stderr is one JSON object, for a log
shipper that reads line by line: the log records, Python's warnings, and what the hub
says whatever the log level (`say`: the URL it listens on, where the first admin key
is, that it is shutting down), which text mode prints as plain lines for a person.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from sonde.hub.mcp_session_end import SessionEndedFilter
from sonde.log_levels import TextFormatter
from sonde.stderr_lines import QueuedStderr, say_line

FIELDS_ATTRIBUTE = "sonde_fields"  # a record's extra JSON fields (`say`)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, FIELDS_ATTRIBUTE, None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


SAY_EVERY_S = 60.0
MAX_SUBJECTS = 10_000  # subjects remembered; past it the oldest is forgotten (its next event said)


class Throttled:
    """When a repeated event is worth a log line: its first, then one a minute per subject,
    with the count since; not a line for each of a client's retries. At most ``max_subjects``
    are remembered: subjects may be client addresses, which anyone can have many of."""

    def __init__(self, every_s: float = SAY_EVERY_S, max_subjects: int = MAX_SUBJECTS) -> None:
        self.every_s = every_s
        self.max_subjects = max_subjects
        self._said_at: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def due(self, subject: str) -> int | None:
        """Count one event; the events since the last line when one is due now, else None."""
        now = time.monotonic()
        self._since[subject] = self._since.get(subject, 0) + 1
        if now - self._said_at.get(subject, -self.every_s) < self.every_s:
            return None
        if subject not in self._said_at and len(self._said_at) >= self.max_subjects:
            oldest = next(iter(self._said_at))
            del self._said_at[oldest]
            self._since.pop(oldest, None)
        self._said_at[subject] = now
        return self._since.pop(subject)


class OncePerMinute(logging.Filter):
    """Lets one record a minute through, without its traceback, saying how many were held back.

    For trio's accept loop: a hub out of file descriptors logged every failed accept, ten a
    second, each with the same traceback (789 of them in 80 s of one load review)."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._at = -every_s
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self._at < self.every_s:
            self._held += 1
            return False
        if self._held:
            record.msg = f"{record.msg} (and {self._held} more like it since the last one said)"
        record.exc_info = record.exc_text = None
        self._at, self._held = now, 0
        return True


ACCEPT_LOOP_LOGGER = "trio.serve_listeners"
SERVER_LOGGER = "hypercorn.error"  # every hypercorn record but access lines, "Running on" among them


class ServerLoggerNamed(logging.Filter):
    """Names hypercorn's records ``hypercorn``: its "error" logger says "Running on ..." at each
    start, and a search of the hub's log for "error" found that line every time."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.name = "hypercorn"
        return True


def configure_logging(log_format: str = "text", level: str = "INFO") -> None:
    """Log lines (and `say`'s) to stderr through a thread (`QueuedStderr`): a stderr nobody
    reads for a while (a terminal paused with Ctrl-S, a stuck log reader) stops no request."""
    handler = QueuedStderr(sys.stderr.fileno())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)  # a library's warning is a record too, not a text line
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for noisy in ("hypercorn.access", "mcp.server.streamable_http", "mcp.server.streamable_http_manager"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    sdk_transport = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, SessionEndedFilter) for f in sdk_transport.filters):
        sdk_transport.addFilter(SessionEndedFilter())
    # its "Invalid Host header: NAME" says nothing of the fix; the hub logs its own line (`sonde.hub.asgi`)
    logging.getLogger("mcp.server.transport_security").setLevel(logging.ERROR)
    server = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, ServerLoggerNamed) for f in server.filters):
        server.addFilter(ServerLoggerNamed())
    accept_loop = logging.getLogger(ACCEPT_LOOP_LOGGER)
    if not any(isinstance(f, OncePerMinute) for f in accept_loop.filters):
        accept_loop.addFilter(OncePerMinute())


def say(
    text: str, log_format: str, *, logger: str = "sonde.hub", level: int = logging.INFO, **fields: Any
) -> None:
    """Put ``text`` on stderr whatever the log level: as it is in text mode; in json mode as one
    JSON record (of ``level``) with ``fields`` beside the message. ``text`` may span lines in
    text mode only: give json mode its own one-line wording."""
    if log_format != "json":
        say_line(text)
        return
    record = logging.getLogger(logger).makeRecord(logger, level, "", 0, text, (), None)
    setattr(record, FIELDS_ATTRIBUTE, fields)
    say_line(JsonFormatter().format(record))

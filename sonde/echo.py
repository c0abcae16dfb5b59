"""How much of a caller's own text a message repeats: a request may be megabytes, and an
answer (or a log line) that echoes it whole costs the reader its context."""

from __future__ import annotations

ECHO_CHARS = 64


def clipped(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters, with '...' when it was longer."""
    return text if len(text) <= limit else text[:limit] + "..."


def echoed(text: str) -> str:
    """``text`` quoted for a message: whole when short, else its first `ECHO_CHARS` and its length."""
    if len(text) <= ECHO_CHARS:
        return repr(text)
    return f"{text[:ECHO_CHARS]!r}... ({len(text)} characters)"

"""How much of a caller's own text a message repeats: a request may be megabytes, and an
answer (or a log line) that echoes it whole costs the reader its context."""

from __future__ import annotations

from sonde.protocol.names import SECRET_SHAPE

ECHO_CHARS = 64


def holds_secret(text: str) -> bool:
    """Whether ``text`` has the shape of a Sonde API key or enrollment token (or holds one)."""
    return SECRET_SHAPE.search(text) is not None


def without_secrets(text: str) -> str:
    """``text`` with each Sonde API key or enrollment token in it replaced by its prefix and ``[hidden]``."""
    return SECRET_SHAPE.sub(r"\1_[hidden]", text)


def as_sentence(text: str) -> str:
    """``text`` ended as a sentence, for another to follow: a full stop added unless it ends in one
    (or in '?' or '!'), so a message that brings its own is not followed by ".."."""
    stripped = text.rstrip()
    return stripped if stripped.endswith((".", "?", "!")) else f"{stripped}."


def clipped(text: str, limit: int = ECHO_CHARS) -> str:
    """``text`` cut to its first ``limit`` characters, with '...' when it was longer."""
    return text if len(text) <= limit else text[:limit] + "..."


def echoed(text: str) -> str:
    """``text`` quoted for a message: whole when short, else its first `ECHO_CHARS` and its length;
    a Sonde secret in it is never shown (`without_secrets`)."""
    text = without_secrets(text)
    if len(text) <= ECHO_CHARS:
        return repr(text)
    return f"{text[:ECHO_CHARS]!r}... ({len(text)} characters)"

"""JSON that is also text: JSON lets a string escape half a surrogate pair (``"\\ud800"``).

Python parses such a string and keeps the lone surrogate, which no UTF-8
encoder takes: SQLite, a log line, a hash, an HTTP header or the answer written
back out would fail on it later, far from the input. Every boundary that parses
JSON from outside refuses it at once with `escapes_lone_surrogate`. Text this
side made itself (a probe's result quoting a file or process name whose bytes
were not UTF-8) is repaired instead, with `valid_text` / `valid_unicode`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


def encodable(value: object) -> bool:
    """Whether ``value`` (parsed JSON) can be written as UTF-8."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def escapes_lone_surrogate(text: str | bytes, value: object) -> bool:
    """Whether ``value``, parsed from the JSON ``text``, holds half a surrogate pair.

    Checked only when ``text`` escapes a surrogate at all (a whole pair, an
    emoji, is fine), so the common case costs one scan of the text.
    """
    if isinstance(text, bytes):
        escaped = _SURROGATE_ESCAPE_BYTES.search(text) is not None
    else:
        escaped = _SURROGATE_ESCAPE_TEXT.search(text) is not None
    return escaped and not encodable(value)


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: bytes that were not UTF-8 shown as ``\\xff``, a stray surrogate as ``\\udXXX``.

    Python keeps the undecodable bytes of a file name, a process name or a
    command line (os, psutil) as lone surrogates, which no UTF-8 encoder takes.
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def valid_unicode(value: Any) -> Any:
    """``value`` (parsed JSON) with every string, keys included, made `valid_text`."""
    return each_string(value, valid_text)


def each_string(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` (parsed JSON) with ``change`` made to every string in it, keys included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {change(key): each_string(item, change) for key, item in value.items()}
    if isinstance(value, list):
        return [each_string(item, change) for item in value]
    return value


class RepeatedKey(ValueError):
    """A JSON object names one key twice: which value was meant is a guess (Python keeps the last)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {json.dumps(key)} appears twice in one object: send each key once")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise RepeatedKey(key)
        found[key] = value
    return found


def loads_unique(text: str | bytes) -> Any:
    """``json.loads``, refusing an object that repeats a key (`RepeatedKey`, a ValueError)."""
    return json.loads(text, object_pairs_hook=_unique_keys)

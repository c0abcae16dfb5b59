"""The values in the query text the database packs send on, as ``?`` unless the agent config shows them.

A statement in pg_stat_activity, MySQL's process list or Redis's slow log holds the values it
was sent with: an email address, a password hash, a session token. What a slow or blocked
statement is read for is its shape, as pg_stat_statements and MySQL's statement digests show
it; the values would leave the machine for the hub and the model behind it. So, unless the
pack's ``show_values`` is ``true`` in the agent config:

- SQL (`masked_sql`): string literals ('...', E'...', X'...', MySQL's "..."), PostgreSQL's
  dollar-quoted strings and numbers read ``?``; keywords, identifiers ("quoted" in
  PostgreSQL, `quoted` in MySQL), parameters ($1, ?) and comments stay. A text cut short
  inside a literal (the probes cut statements at 1000 characters) is masked to its end.
- Redis (`masked_command`): the command and its first argument (a key, mostly) stay; every
  further argument reads ``?``, except the slow log's own "... (N more arguments)".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from sonde.packs.context import ProbeContext

Dialect = Literal["postgres", "mysql"]
SHOW_VALUES = "show_values"  # the pack setting (packs.<pack>.show_values) that keeps them
MASK = "?"
NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|0[bB][01]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
PREFIXES = {"e": True, "b": False, "x": False, "n": True}  # a string's prefix letter: backslash escapes?
MORE_ARGUMENTS = re.compile(r"\.\.\. \(\d+ more arguments\)")  # the slow log's own cut


def values_shown(ctx: ProbeContext, pack: str) -> bool:
    """Whether ``pack``'s agent settings keep the values (``"show_values": true``)."""
    return ctx.settings.for_pack(pack).get(SHOW_VALUES) is True


def masked_sql(text: str, dialect: Dialect) -> str:
    """``text`` with its literal values as ``?`` (see the module)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i) or (c == "#" and dialect == "mysql"):
            end = _find(text, "\n", i)
            out.append(text[i:end])
            i = end
        elif text.startswith("/*", i):
            end = _find(text, "*/", i + 2, past=True)
            out.append(text[i:end])
            i = end
        elif c == "'" or (c == '"' and dialect == "mysql"):
            i = _string_end(text, i, escapes=dialect == "mysql")
            out.append(MASK)
        elif c == '"' or (c == "`" and dialect == "mysql"):  # a quoted identifier
            end = _string_end(text, i, escapes=False)
            out.append(text[i:end])
            i = end
        elif c == "$" and dialect == "postgres" and (tag := DOLLAR_TAG.match(text, i)):
            close = text.find(tag.group(), tag.end())
            i = n if close == -1 else close + len(tag.group())
            out.append(MASK)
        elif _word_character(c):
            end = i
            while end < n and _word_character(text[end]):
                end += 1
            word = text[i:end]
            number = NUMBER.match(text, i) if word[0].isdigit() else None
            if number and number.end() >= end:  # not MySQL's 1st_table, a name that starts with digits
                end = number.end()
                out.append(MASK)
            elif len(word) == 1 and word.lower() in PREFIXES and text[end : end + 1] == "'":
                end = _string_end(text, end, escapes=dialect == "mysql" or PREFIXES[word.lower()])
                out.append(MASK)
            else:
                out.append(word)
            i = end
        elif c == "." and text[i + 1 : i + 2].isdigit() and not (out and _word_character(out[-1][-1])):
            number = NUMBER.match(text, i)
            i = number.end() if number else i + 1
            out.append(MASK)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def masked_command(arguments: Sequence[str]) -> list[str]:
    """A Redis command's words with every argument after the first as ``?`` (see the module)."""
    return [
        word if index < 2 or MORE_ARGUMENTS.fullmatch(word) else MASK for index, word in enumerate(arguments)
    ]


def _word_character(c: str) -> bool:
    return c.isalnum() or c in "_$"


def _find(text: str, needle: str, start: int, *, past: bool = False) -> int:
    """Where ``needle`` is from ``start`` (after it, ``past``); the end of ``text`` if it is not."""
    at = text.find(needle, start)
    if at == -1:
        return len(text)
    return at + len(needle) if past else at


def _string_end(text: str, start: int, *, escapes: bool) -> int:
    """The index after the quoted text opening at ``start`` (its quote doubled inside it, or
    after a backslash where ``escapes``); the end of ``text`` if it was cut inside."""
    quote, i, n = text[start], start + 1, len(text)
    while i < n:
        if escapes and text[i] == "\\":
            i += 2
        elif text[i] == quote:
            if text[i + 1 : i + 2] != quote:
                return i + 1
            i += 2
        else:
            i += 1
    return n

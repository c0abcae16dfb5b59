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

Dialect = Literal["postgres", "mysql", "lua"]  # lua: a Redis EVAL's script
SHOW_VALUES = "show_values"  # the pack setting (packs.<pack>.show_values) that keeps them
MASK = "?"
NUMBER = re.compile(
    r"0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][+-]?\d+)?"
)
DOLLAR_TAG = re.compile(r"\$(?:[^\W\d]\w*)?\$")  # a tag is an identifier: any letter, then letters and digits
LONG_BRACKET = re.compile(r"\[(=*)\[")  # Lua's long string (and, after --, comment)
PREFIXES = {"e": True, "b": False, "x": False, "n": True}  # a string's prefix letter: backslash escapes?
MORE_ARGUMENTS = re.compile(r"\.\.\. \(\d+ more arguments\)")  # the slow log's own cut
SCRIPT_COMMANDS = {"EVAL", "EVAL_RO"}  # their first argument is a Lua script, not a key


def values_shown(ctx: ProbeContext, pack: str) -> bool:
    """Whether ``pack``'s agent settings keep the values (``"show_values": true``)."""
    return ctx.settings.for_pack(pack).get(SHOW_VALUES) is True


def shown_query(text: str | None, dialect: Dialect, shown: bool) -> str | None:
    """A statement as a probe sends it: as it is where ``shown`` (`values_shown`), else `masked_sql`."""
    return text if text is None or shown else masked_sql(text, dialect)


def masked_sql(text: str, dialect: Dialect) -> str:
    """``text`` with its literal values as ``?`` (see the module).

    Strings are read as the server reads them by default: MySQL's and Lua's with backslash
    escapes, PostgreSQL's without (but E'...'). A session that reads them otherwise (MySQL's
    NO_BACKSLASH_ESCAPES, PostgreSQL's standard_conforming_strings off) can have a value cut in
    two: the scrubber still sees the result."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if comment := _comment_end(text, i, dialect):
            out.append(text[i:comment])
            i = comment
        elif text.startswith(("/*!", "/*+"), i) and dialect != "lua":  # MySQL's executable comment, a hint:
            out.append(text[i : i + 3])  # SQL inside, read as such
            i += 3
        elif c == "'" or (c == '"' and dialect != "postgres"):
            i = _string_end(text, i, escapes=dialect != "postgres")
            out.append(MASK)
        elif (c == '"' and dialect == "postgres") or (c == "`" and dialect == "mysql"):  # a quoted name
            end = _string_end(text, i, escapes=False)
            out.append(text[i:end])
            i = end
        elif c == "[" and dialect == "lua" and (bracket := LONG_BRACKET.match(text, i)):
            i = _find(text, f"]{bracket.group(1)}]", bracket.end(), past=True)
            out.append(MASK)
        elif c == "$" and dialect == "postgres" and (tag := DOLLAR_TAG.match(text, i)):
            i = _find(text, tag.group(), tag.end(), past=True)
            out.append(MASK)
        elif _word_character(c):
            end = i
            while end < n and _word_character(text[end]):
                end += 1
            word = text[i:end]
            number = NUMBER.match(text, i) if word[0].isdigit() else None
            # a MySQL name may start with digits (1st_table); PostgreSQL reads 123abc as 123 AS abc
            if number and (number.end() >= end or dialect != "mysql"):
                end = number.end()
                out.append(MASK)
            elif (
                len(word) == 1
                and word.lower() in PREFIXES
                and text[end : end + 1] == "'"
                and dialect != "lua"
            ):
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
    """A Redis command's words with every argument after the first as ``?``, and an EVAL's
    script with its literals as ``?`` (see the module)."""
    if arguments and arguments[0].upper() in SCRIPT_COMMANDS and len(arguments) > 1:
        return [arguments[0], masked_sql(arguments[1], "lua"), *(MASK for _ in arguments[2:])]
    return [
        word if index < 2 or MORE_ARGUMENTS.fullmatch(word) else MASK for index, word in enumerate(arguments)
    ]


def _comment_end(text: str, i: int, dialect: Dialect) -> int:
    """The end of the comment that starts at ``i`` (0: none starts there). MySQL's ``--`` is one
    only before a blank (``bal--5`` is bal - -5); PostgreSQL's ``/* */`` nest; Lua's ``--[[`` runs
    to its long bracket's close."""
    if text.startswith("--", i):
        after = text[i + 2 : i + 3]
        if dialect == "mysql" and after and not (after.isspace() or ord(after) < 32):
            return 0
        if dialect == "lua" and (bracket := LONG_BRACKET.match(text, i + 2)):
            return _find(text, f"]{bracket.group(1)}]", bracket.end(), past=True)
        return _find(text, "\n", i)
    if text.startswith("#", i) and dialect == "mysql":
        return _find(text, "\n", i)
    if not text.startswith("/*", i) or dialect == "lua" or text.startswith(("/*!", "/*+"), i):
        return 0
    depth, j = 1, i + 2
    while depth and j < len(text):
        if text.startswith("*/", j):
            depth, j = depth - 1, j + 2
        elif dialect == "postgres" and text.startswith("/*", j):
            depth, j = depth + 1, j + 2
        else:
            j += 1
    return j


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

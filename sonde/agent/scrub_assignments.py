"""Assignments the rules keyed by a field name read in other syntaxes: percent-encoded in a URL
and with the name in brackets.

`sonde.agent.scrub_rules` finds a secret name where a stem occurs and tries its patterns
anchored at the name's start; when none of its own matches, it tries these: ``ENCODED_ASSIGN``
(``password%3DX`` in an access log's query string, encoded once or twice, and JSON's
``%22password%22%3A%22X%22``) and `bracketed_match` (php-fpm's ``env[DB_PASSWORD] = X``, a PHP
array's ``$cfg['password'] = 'X';``). A name right after a percent-encoded byte ("%3Fpass") is
read without the byte's hex digits (`after_percent_byte`). Only the separator and the value's end
are read encoded; nothing is decoded. Every repetition is bounded and most are possessive.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_shapes import FRESH

# Where a name starts: not inside a word, or right after a percent-encoded byte ("%26password=").
NAME_START = r"(?:(?<![\w.-])|(?<=%[0-9A-Fa-f]{2})|(?<=%25[0-9A-Fa-f]{2}))"

# A name in brackets: php-fpm's pool settings (env[DB_PASSWORD] = X, php_admin_value[NAME] = X:
# the rest of the line), a PHP array's element set to a string that ends its statement
# ($cfg['Servers'][$i]['password'] = 'X'; not $h['Authorization'] = 'Basic ' . $x, nor
# Python's headers["Authorization"] = "x").
_PHP_FPM_SETTING = re.compile(r"[ \t]*(?:env|php(?:_admin)?_(?:value|flag))\[")
_PHP_ARRAY = re.compile(r"\$\w{1,64}+(?:\[[^\]\r\n\x00]{0,256}+\]){0,8}+\[")
_FPM_ASSIGN = re.compile(
    r"(?P<name>\w[\w.-]{0,80}+)(?P<sep>\][ \t]*=[ \t]*)"
    + FRESH
    + r"(?P<value>[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?)"
)
_ELEMENT_ASSIGN = re.compile(
    r"(?P<name>\w[\w.-]{0,80}+)(?P<sep>[\"']\][ \t]*=[ \t]*)"
    + FRESH
    + r"(?P<value>\"(?:[^\"\\\r\n\x00]|\\[^\x00]){1,4096}+\"|'(?:[^'\\\r\n\x00]|\\[^\x00]){1,4096}+')"
    + r"(?=[ \t]*(?:[;,)]|\r?\n|\x00|\Z))"
)


def bracketed_match(text: str, start: int) -> re.Match[str] | None:
    """The php-fpm setting or array element whose name, in brackets, starts at ``start``."""
    line = max(text.rfind("\n", 0, start), text.rfind("\x00", 0, start)) + 1
    if text[start - 2 : start] in ("['", '["'):
        variable = text.find("$", line, start)
        php = variable != -1 and _PHP_ARRAY.fullmatch(text, variable, start - 1)
        return _ELEMENT_ASSIGN.match(text, start) if php else None
    if _PHP_FPM_SETTING.fullmatch(text, line, start):
        return _FPM_ASSIGN.match(text, start)
    return None


# A name and its value percent-encoded once or twice in a URL (an access log's query string):
# "password%3DX" (to "&" or "%26"), JSON's "%22password%22%3A%22X%22" (to "%22"). Only the
# separator and the value's end are read encoded; nothing is decoded.
_PCT = r"%(?:25)?"  # a "%", maybe encoded again ("%253D")
ENCODED_ASSIGN = re.compile(
    NAME_START
    + r"(?P<name>\w[\w.-]{0,80}+)(?P<sep>"
    + _PCT
    + r"3[Dd]|(?P<quote>"
    + _PCT
    + r"22)"
    + _PCT
    + r"3[Aa](?:"
    + _PCT
    + r"20){0,4}+"
    + _PCT
    + r"22)"
    + FRESH
    + r"(?P<value>(?:[^\s\x00\"'&%<>]|%(?!(?:25)?(?(quote)22|26))[0-9A-Fa-f]{2}){1,4096}+)"
)


def after_percent_byte(text: str, start: int) -> int:
    """Where a name starting at ``start`` starts without the hex digits of a "%XX" (or, encoded
    twice, "%25XX") before it ("%3Fpass%3DX" is "pass"); ``start`` when there is none."""
    byte = _PERCENT_BYTE.match(text, start) if start and text[start - 1] == "%" else None
    return byte.end() if byte else start


_PERCENT_BYTE = re.compile(r"(?:25)?[0-9A-Fa-f]{2}")

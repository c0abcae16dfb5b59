"""Assignments the rules keyed by a field name read in other syntaxes: percent-encoded in a URL,
with the name in brackets, annotated with a type, a value in LDIF's base64 or a YAML block.

`sonde.agent.scrub_rules` finds a secret name where a stem occurs and tries its patterns
anchored at the name's start. ``ANNOTATED_ASSIGN`` goes first: a Python or TypeScript annotated
assignment (``password: str = "X"``, ``api_key: Optional[str] = "X"``) holds its value after
the ``=``, not in its type (an unquoted name, ``True``, ``None``, a constant, or a call is no
secret: `is_code`). When none of its own matches, it tries ``YAML_BLOCK`` (``password: |`` and
the lines indented under it), ``LDIF_BASE64`` (``userPassword:: BASE64``), ``ENCODED_ASSIGN``
(``password%3DX`` in an access log's query string, encoded once or twice, and JSON's
``%22password%22%3A%22X%22``) and `bracketed_match` (php-fpm's ``env[DB_PASSWORD] = X``, a PHP
array's ``$cfg['password'] = 'X';``). A name right after a percent-encoded byte ("%3Fpass") is
read without the byte's hex digits (`after_percent_byte`). Only the separator and the value's end
are read encoded; nothing is decoded. Every repetition is bounded and most are possessive.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_shapes import BARE, FRESH, QUOTED
from sonde.agent.secret_names import is_secret_name

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


# A type annotation before a value: a class or a dotted name (Final, Optional[str], typing.Any,
# SecretStr), a builtin type (str, string ...), maybe subscripted and in a union (str | None).
_TYPE = (
    r"(?:[A-Z][\w.]{0,64}+|(?:str|int|float|bool|bytes|dict|list|tuple|set|string|number|boolean|any|object)"
    r"(?![\w.]))(?:\[[\w.,\[\] |]{0,256}\])?(?:[ \t]*\|[ \t]*[\w.]{1,64}+(?:\[[\w.,\[\] |]{0,256}\])?){0,4}+"
)
ANNOTATED_ASSIGN = re.compile(
    NAME_START
    + r"(?P<name>\w[\w.-]{0,80}+)(?P<sep>[ \t]*:[ \t]*"
    + _TYPE
    + r"[ \t]+=[ \t]+)(?P<value>\[REDACTED\]|"  # hidden already: no secret, and no other match
    + QUOTED
    + "|"
    + BARE
    + ")"
)
_CODE_NAME = re.compile(r"[A-Za-z_][\w.]{0,4095}")  # True, None, a constant: code, unquoted
# A call as a bare value holds it: NAME(ARGUMENTS), or cut at its first blank or separator
# (getenv(NAME, DEFAULT) is "getenv(NAME"); Pa(ss)word1 goes on after its group: no call.
_CALL = re.compile(r"(?P<callee>[A-Za-z_][\w.]{0,4095}+)\([^()]{0,4096}+\)?")
# Calls reading an environment variable, maybe with a default that scrub_app_configs' env_default hides.
_ENV_READERS = frozenset({"env", "getenv", "getenv_docker", "os.getenv", "os.environ.get", "ENV.fetch"})


# nsswitch.conf's "passwd: files systemd" names where accounts come from, not a password.
NSS_SOURCES = frozenset(
    {
        "files", "compat", "db", "nis", "nisplus", "ldap", "sss", "systemd", "winbind", "hesiod",
        "extrausers", "altfiles", "usrfiles", "cache", "mymachines", "[notfound=return]",
    }
)  # fmt: skip
# MySQL's and MariaDB's "Access denied for user 'u'@'h' (using password: YES)": whether a
# password was sent, no password.
_USING_PASSWORD = re.compile(r"(?i:using )password: (?:YES|NO)\Z")


def says_no_secret(match: re.Match[str], name: str, value: str) -> bool:
    """Whether a secret name's ``value`` (unquoted) is none: nsswitch's sources, MySQL's
    "(using password: YES)", a message about a file (`names_a_file`), code (`is_code`)."""
    if name.lower() == "passwd" and value.lower() in NSS_SOURCES:
        return True
    if names_a_file(match, name):
        return True
    return bool(_USING_PASSWORD.match(match.string, max(0, match.start() - 6), match.end())) or is_code(match)


# A file's extension (log, yaml, json, pem ...): a name ending with one names a file.
_EXTENSION = re.compile(r"[A-Za-z][A-Za-z0-9]{0,7}")
_MESSAGE_SEPARATOR = re.compile(r":[ \t]+")


def names_a_file(match: re.Match[str], name: str) -> bool:
    """Whether ``name`` ends a path and has a file's extension, then ": " and a message: a refusal
    or a report about the file ("/srv/logs/secrets.log: not a regular file", file(1)'s "/x/token.json:
    JSON data"), no field. grep's "/x/token.txt:LINE" (no blank), a name without an extension
    (/run/secrets/db_password: X) or with a secret one (/etc/app/db.password: X) stay secrets."""
    start = match.start("name")
    if not start or match.string[start - 1] != "/" or "sep" not in match.re.groupindex:
        return False
    stem, dot, extension = name.rpartition(".")
    return (
        bool(dot and stem)
        and _MESSAGE_SEPARATOR.fullmatch(match["sep"]) is not None
        and _EXTENSION.fullmatch(extension) is not None
        and not is_secret_name(extension)
    )


def is_code(match: re.Match[str]) -> bool:
    """Whether a name's value is code, no secret: a call reading an environment variable
    (``password => env('DB_PASSWORD', ...)``), or an `ANNOTATED_ASSIGN`'s name or call
    (``HAS_PSK: Final[bool] = True``, ``mode: int = HIDE_ALL``, ``token: str = Field(...)``): in
    code a string is quoted."""
    value = match["value"]
    call = _CALL.fullmatch(value)  # a bare value holds the call (BARE takes its arguments)
    called = call is not None or match.string.startswith("(", match.end())
    if called and (call["callee"] if call else value) in _ENV_READERS:
        return True
    if match.re is not ANNOTATED_ASSIGN:
        return False
    return called or _CODE_NAME.fullmatch(value) is not None


# An LDIF value in base64 after "::" (ldapsearch and slapcat print userPassword so, and any value
# starting with "{" or not ASCII: "userPassword:: e1NTSEF9..."): the value whole, with the lines
# it is folded onto (indented: the LDIF may sit in a YAML block). At least one blank after "::",
# as LDIF tools print it: "Auth::Token" in code is a scope, not a value. A line a probe cut ends
# with its "…".
_BASE64_LINE = r"[A-Za-z0-9+/]{1,4096}+={0,2}+…?"
LDIF_BASE64 = re.compile(
    r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]{0,80}+)::[ ]{1,16}+(?P<value>"
    + _BASE64_LINE
    + r"(?:[ \t]{0,16}+\r?\n[ \t]{1,64}+"
    + _BASE64_LINE
    + r"(?=[ \t]{0,16}+(?:\r?\n|\x00|\Z))){0,256}+)(?![^\s\x00])"
)
# A YAML block scalar (password: |, key: >-): the lines indented under it.
YAML_BLOCK = re.compile(
    r"(?P<name>[A-Za-z_][\w.-]{0,80}+)[\"']?[ \t]*:[ \t]*[|>][-+0-9]{0,2}[ \t]*\r?\n(?P<indent>[ \t]++)"
    + FRESH
    + r"(?P<value>[^\r\n\x00]{1,4096}+(?:\r?\n(?P=indent)[^\r\n\x00]{0,4096}+){0,200}+)"
)

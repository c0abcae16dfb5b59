"""The scrubber's rules for credential files: a line per account, its secret in a field.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others. Some files' lines say what they hold by their shape alone: postfix's
sasl_passwd (``[smtp.gmail.com]:587 alice@gmail.com:PW``), pgbouncer's userlist.txt
(``"appuser" "PW"``), password hashes (shadow's and htpasswd's ``$6$...``, ``$apr1$...``,
``{SHA}...``). Others hold lines any text may hold (``alice:PW``, ``alice * PW *``): those are
read only after a mention of the file (`_lines_of`: a probe's answer names the file it read
before its content or lines, as do ``tail``'s "==> FILE <==" and a ``cat FILE`` line; pppd's
own header comment names its files too), and only as long as the lines after it read as the
file's. Every repetition is bounded and most are possessive: hostile text scrubs in linear time.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_gates import contains, contains_folded
from sonde.agent.scrub_shapes import FRESH, ShapeRule

_LINE_START = r"(?<![^\n\x00])[ \t]{0,64}+"
_LINE_END = r"(?=\r?\n|\x00|\Z)"
_REST_OF_LINE = r"[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?"  # to the line's end, blanks after it left
_FILE_LINES_MAX = 65536  # lines of a file read after its mention
_FILE_CONTENT_MAX = 1 << 21  # characters of a file's content after its path (a probe reads 1 MiB at most)


def _lines_of(files: str, line: str) -> re.Pattern[str]:
    """A mention of one of ``files``, then (as ``value``) the run of lines after it (across a
    result's NULs too) that read as the file's: ``line``, a comment or a blank line. A line
    mentioning one of ``files`` again ends the run (and starts another): "$ cat
    /etc/ppp/chap-secrets" is no line of the file. A string that is a path to one of ``files``
    (a probe's "path") is followed by the file's content (as ``content``): every line of it, a
    line of another shape before a secret's (a note without "#") ending no run."""
    return re.compile(
        r"(?<![^\x00])[^\s\x00]{0,4096}?(?:"
        + files
        + r")\x00(?P<content>[^\x00]{1,"
        + str(_FILE_CONTENT_MAX)
        + r"}+"
        + _run_of(files, line, 0)
        + r")|(?:"
        + files
        + r")[^\n\x00]{0,4096}+(?P<value>"
        + _run_of(files, line, 1)
        + ")"
    )


def _run_of(files: str, line: str, least: int) -> str:
    """At least ``least`` lines after the one before that read as the file's (see `_lines_of`)."""
    return (
        r"(?:[\n\x00](?![^\n\x00]{0,4096}?(?:"
        + files
        + r"))(?:"
        + line
        + r"|[ \t]{0,64}+(?:#[^\r\n\x00]{0,4096}+)?\r?"
        + _LINE_END
        + r")){"
        + str(least)
        + ","
        + str(_FILE_LINES_MAX)
        + r"}+"
    )


# postfix's sasl_passwd (smtp_sasl_password_maps): NEXTHOP USER:PASSWORD, the password the rest of
# the line. By its shape alone when the next hop is bracketed ([smtp.gmail.com]:587), a host with a
# port, or a sender (@example.com, bob@example.com: sender-dependent maps), or when it is a host and
# the user an address (not git's "origin git@github.com:org/repo", a time's "5:30 0:30");
# a relay or transport map's "@example.com [smtp.example.com]:587" or "bob@example.com
# smtp:[mail.example.com]" holds no password (a value starting with "[" or a bare port), nor does
# a Markdown reference's "[1] https://example.com".
_HOST = r"[A-Za-z0-9-]{1,63}+(?:\.[A-Za-z0-9-]{1,63}+){1,8}+"  # a host name with a dot, or an IPv4 address
_NEXTHOP = r"(?:\[[^\]\s\x00]{1,253}+\](?::\d{1,5}+)?|" + _HOST + r":\d{1,5}+|[\w.+-]{0,64}+@" + _HOST + ")"
SASL_PASSWD_LINE = ShapeRule(
    "sasl_passwd_line",
    re.compile(
        _LINE_START
        + r"(?:"
        + _NEXTHOP
        + r"[ \t]++[^\s\x00:]{1,256}+|"
        + _HOST
        + r"[ \t]++[\w.+-]{1,64}+@"
        + _HOST
        + r"):"
        + FRESH
        + r"(?![\[]|//|\d{1,5}+[ \t]*"
        + _LINE_END
        + r")(?P<value>"
        + _REST_OF_LINE
        + r")"
        + _LINE_END
    ),
    contains(":"),
)

# pgbouncer's userlist.txt (auth_file): "USER" "PASSWORD" (or its md5 or SCRAM verifier, as good
# as the password to pgbouncer), "" a quote inside; a line of two quoted strings alone, not
# indented and no shell variable ('\t"$set" "$sum"' in a script).
PGBOUNCER_USERLIST_LINE = ShapeRule(
    "pgbouncer_userlist_line",
    re.compile(
        r"(?<![^\n\x00])\"(?:[^\"\s\x00$]|\"\"){1,256}+\"[ \t]++\""
        + FRESH
        + r"(?!\$)"
        + r"(?P<value>(?:[^\"\r\n\x00]|\"\"){1,4096}+)\"[ \t]*+"
        + _LINE_END
    ),
    contains('" "', '"\t"'),
)

# pppd's chap-secrets and pap-secrets: CLIENT SERVER SECRET [ADDRESSES...], each field maybe
# quoted; the addresses an IP (maybe "!" or "/bits"), "*" or "-". A line of three words of prose
# after a mention of the file reads as one.
_PPP_FIELD = r"(?:\"[^\"\r\n\x00]{0,256}+\"|[^\s\x00\"#]{1,256}+)"
_PPP_ADDRESS = r"!?(?:\*|-|[0-9][0-9./]{0,17}+|[0-9A-Fa-f]{0,4}+:[0-9A-Fa-f:./]{1,42}+)"
_PPP_BEFORE_SECRET = r"(?<![^\n\x00])[ \t]{0,64}+" + _PPP_FIELD + r"[ \t]++" + _PPP_FIELD + r"[ \t]++"
PPP_SECRETS_LINES = ShapeRule(
    "ppp_secrets_lines",
    _lines_of(
        r"(?:chap|pap)-secrets|(?i:secrets for authentication using (?:chap|pap))",
        _PPP_BEFORE_SECRET
        + _PPP_FIELD
        + r"(?:[ \t]++"
        + _PPP_ADDRESS
        + r"){0,32}+[ \t]*+(?:#[^\r\n\x00]{0,4096}+)?\r?"
        + _LINE_END,
    ),
    contains_folded("chap-secrets", "pap-secrets", "secrets for authentication using"),
    inner=re.compile(_PPP_BEFORE_SECRET + FRESH + r"(?P<value>" + _PPP_FIELD + r")"),
)

# rsyncd's secrets file: USER:PASSWORD (or @GROUP:PASSWORD), the password the rest of the line.
_RSYNCD_USER = r"(?<![^\n\x00])[ \t]{0,64}+@?[^\s\x00:#@][^\s\x00:]{0,255}+:"
RSYNCD_SECRETS_LINES = ShapeRule(
    "rsyncd_secrets_lines",
    _lines_of(r"rsyncd?\.secrets", _RSYNCD_USER + _REST_OF_LINE + _LINE_END),
    contains(".secrets"),
    inner=re.compile(_RSYNCD_USER + FRESH + r"(?P<value>" + _REST_OF_LINE + r")"),
)

# postfix's sasl_passwd read as a file: any NEXTHOP USER:PASSWORD line (smtp.example.com alice:PW).
_SASL_BEFORE_PASSWORD = r"(?<![^\n\x00])[ \t]{0,64}+[^\s\x00#][^\s\x00]{0,255}+[ \t]++[^\s\x00:]{1,256}+:"
SASL_PASSWD_FILE_LINES = ShapeRule(
    "sasl_passwd_file_lines",
    _lines_of(r"sasl_passwd", _SASL_BEFORE_PASSWORD + _REST_OF_LINE + _LINE_END),
    contains("sasl_passwd"),
    inner=re.compile(_SASL_BEFORE_PASSWORD + FRESH + r"(?P<value>" + _REST_OF_LINE + r")"),
)

# A crypt(3) password hash (shadow, htpasswd, haproxy, chpasswd -e ...): $ID$[PARAMS$][SALT$]HASH for
# MD5 ($1$, Apache's $apr1$), SHA-256/512 ($5$, $6$, rounds=N), bcrypt ($2a$, $2b$, $2y$), yescrypt
# ($y$, $gy$), scrypt ($7$), argon2 ($argon2id$v=19$m=...$) and their kin; the "$ID$" stays (it says
# which scheme), the rest is hidden. "$1$2" in a shell line is too short to be one.
_CRYPT_IDS = r"(?:1|2[abxy]?|5|6|7|y|gy|md5|sha1|apr1|argon2(?:id|i|d)|scrypt|pbkdf2(?:-sha(?:256|512))?)"
CRYPT_HASH = ShapeRule(
    "crypt_hash",
    re.compile(
        r"\$(?<![\w$]\$)"
        + _CRYPT_IDS
        + r"\$"
        + FRESH
        + r"(?P<value>(?:[\w./,=+-]{0,128}+\$){0,4}+[./A-Za-z0-9+=]{16,4096}+)(?![\w$])"
    ),
    contains("$"),
)

# A {SCHEME} hash (or dovecot's {PLAIN} password) after a user at a line's start: htpasswd's
# "alice:{SHA}BASE64", dovecot's passwd-file "alice:{SSHA512}...:1000:1000::/home/alice".
SCHEME_HASH_LINE = ShapeRule(
    "scheme_hash_line",
    re.compile(
        _LINE_START
        + r"[^\s\x00:#]{1,256}+:\{[A-Z][A-Z0-9.-]{1,31}+\}"
        + FRESH
        + r"(?P<value>[^\s\x00:]{1,4096}+)"
    ),
    contains(":{"),
)

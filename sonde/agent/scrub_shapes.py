"""The scrubber's secrets recognised by their shape, and the regex fragments the rules share.

Each `ShapeRule` is a pattern for one kind of secret (a private key block, a
vendor token, a URL password, a program's password flag ...) behind a cheap
gate; `sonde.agent.scrub_rules` runs them, with the rules keyed by a field
name, in `scrub_text`. Only a rule's value group is redacted (the whole match
when it has none), or, for a rule with an ``inner`` pattern, each of its values
inside that group (every ``>PW`` after ``ACL SETUSER``, every logon on an
``rman`` line). Every pattern starts with a literal or a rare character
so the regex engine skips from one candidate to the next, and every
repetition is bounded: hostile text scrubs in linear time.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sonde.agent.secret_names import is_secret_name

FRESH = r"(?!(?:\\?[\"'])?\[REDACTED\])"  # the value (maybe quoted) is not already redacted
SCHEME = r"(?i:bearer|basic|token|digest|negotiate|bot)[ \t]+"  # an auth scheme before a credential
CUT = r"(?=\x00|\Z)"  # the text ends here: a value cut short (by a line or message cap) is hidden to the end
QUOTED = (
    r'\\"(?:[^"\\\r\n\x00]|\\[^"\x00]){0,4096}\\"'
    + r'|"(?:[^"\\\r\n\x00]|\\[^\x00]){0,4096}"'
    + r"|'[^'\r\n\x00]{0,4096}'"
    # cut before its closing quote
    + r'|\\?"(?:[^"\\\r\n\x00]|\\[^\x00]){1,4096}+'
    + CUT
    + r"|'[^'\r\n\x00]{1,4096}+"
    + CUT
)
BARE = r"[^\s\x00\"'`,;&<>(){}\[\]]{1,4096}"
TOKEN_END = r"(?![A-Za-z0-9])"
# An SQL string literal, its text the value: '...' ('' inside), E'...' (backslash escapes),
# $$...$$ or $tag$...$tag$; hidden to the end of the text when it is cut before its close.
SQL_STRING = (
    r"(?:'(?!\[REDACTED\])(?P<value>(?:[^'\x00]|''){1,4096}+)(?:'|" + CUT + ")"
    r"|[Ee]'(?!\[REDACTED\])(?P<escaped>(?:[^'\\\x00]|\\[^\x00]|''){1,4096}+)(?:'|" + CUT + ")"
    r"|\$(?P<tag>(?:[A-Za-z_]\w{0,62})?)\$(?!\[REDACTED\])(?P<dollar>(?:[^$\x00]|\$(?!(?P=tag)\$)){1,256}+)"
    r"(?:\$(?P=tag)\$|" + CUT + "))"
)
_SQL_WS = r"[ \t\r\n]+"
_URL_PART = r"[^\s\x00/?#\"'<>@]{1,128}+"  # a piece of a URL password between slashes or spaces
_PGPASS_PORT = re.compile(r":(?:\d{1,5}|\*):[^\s:\x00]{1,63}:[^\s:\x00]{1,63}:")  # the gate of pgpass_line
# htpasswd -b[other letters] [FILE] USER PASSWORD: FILE is absent with -n.
_HTPASSWD_OPTS = r"(?:[ \t]+-[A-Za-z]{1,8}(?:[ \t]+\d{1,3}(?=[ \t]))?){1,6}+"
_HTPASSWD_HAS = r"(?=(?:[ \t]+-[A-Za-z]{1,8}(?:[ \t]+\d{1,3})?){0,5}?[ \t]+-[A-Za-z]{0,7}"
_HTPASSWD_WORD = r"[ \t]+[^\s\x00-][^\s\x00]{0,4095}+"
# A shell command separator standing alone as a word ("a && b", "a | b", "a ; b"): the command
# before it ends there. One glued to a word ("x;", "?a=1&b=2" in a URL) is no separator here.
_SEPARATOR = r"(?:&&|\|\||;|\|)"
_SEPARATOR_WORD = _SEPARATOR + r"(?![^\s\x00])"
# A separator glued to the end of a word ("PW;", "PW&&", "PW|"): a shell ends the command there,
# so that word is its command's last. (Only looked at where a secret's place depends on it; a
# password hidden with its glued ";" is over-redaction, not a leak.)
_GLUED_SEPARATOR = r"(?:(?<=;)|(?<=&&)|(?<=\|))"
_NOT_GLUED_SEPARATOR = r"(?<!;)(?<!&&)(?<!\|)"
# The separator words a program's reach stops at: not ";", which a joined argv holds inside
# one item often enough (ps prints `mysql -e SELECT 1 ; SELECT 2 -pX` unquoted) for a
# password after it to be missed; a port hidden after "a ; b" is the lesser harm.
_REACH_SEPARATOR = r"(?:&&|\|\||\|)"
# One character of a program's reach along its line (to a line end, a NUL or a separator
# word): "docker login -p x && docker run -p 8080:80" is two commands, the port no password.
_REACH = r"(?:[^\r\n\x00 \t]|[ \t](?!" + _REACH_SEPARATOR + r"[ \t]))"
# After a program's name and a space, a later word of its command: "redis-cli -h db AUTH".
_LATER = r"(?=[ \t])" + _REACH + r"{0,200}?[ \t]"
# The flags of a program that take a value (the next item) and are not secrets: a word after
# one is its value, not a word of the program ("redis-cli -h auth ping"). The argv form uses
# them too (sonde.agent.scrubber).
REDIS_CLI_VALUED = (
    "-h", "-p", "-s", "-u", "-r", "-i", "-n", "-d", "-D", "-t", "--user", "--cacert", "--cacertdir",
    "--cert", "--sni", "--tls-ciphers", "--tls-ciphersuites", "--rdb", "--functions-rdb",
    "--pipe-timeout", "--memkeys-samples", "--eval", "--pattern", "--quoted-pattern", "--count",
    "--cluster",
)  # fmt: skip
RABBITMQCTL_VALUED = ("-n", "--node", "-t", "--timeout", "-p", "--vhost")
MC_VALUED = ("--api", "--path", "--lookup", "--config-dir", "-C")
# Sybase/SAP ASE isql's flags that take a value (-U sa, -S SERVER; -P PW is a password): not
# unixODBC isql's -c and -w, which take none.
ISQL_VALUED = (
    "-P", "-U", "-S", "-D", "-H", "-I", "-i", "-o", "-E", "-J", "-R", "-s", "-t", "-A", "-a", "-l", "-m",
    "-y", "-z", "-Z", "-K",
)  # fmt: skip
# The OpenLDAP clients' switches (flags taking no value) that getopt lets come clustered before
# the password flag in one item: "ldapsearch -xw PW", "ldapmodify -ZZxwPW" are -x -w PW. A letter
# that is a switch in one client but takes a value in another counts as a switch: misread, it
# hides a filter, not less. -y FILE (a file holding the password) stays.
LDAP_SWITCHES = "ACILMNQVWZacnrtuvxz"
# ldappasswd's, where -a OLD, -s NEW and -t/-T FILE take a value and -A, -S prompt.
LDAPPASSWD_SWITCHES = "ACINQSVWZnvx"
_LDAP_PASSWORD_FLAG = r"-[" + LDAP_SWITCHES + r"]{0,16}+w"  # -w, -xw, -ZZxw
_LDAPPASSWD_PASSWORD_FLAG = r"-[" + LDAPPASSWD_SWITCHES + r"]{0,16}+[asw]"  # and -a OLD, -s NEW
VAULT_VALUED = (
    "-method", "-path", "-address", "-namespace", "-ns", "-field", "-format", "-ca-cert", "-ca-path",
    "-client-cert", "-client-key", "-tls-server-name", "-wrap-ttl", "-mfa", "-header", "-agent-address",
)  # fmt: skip


def _flags_then(valued: tuple[str, ...]) -> str:
    """Any flags (a valued one with its value) before the next item: "-v", "-n rabbit@h"."""
    names = "|".join(re.escape(name) for name in sorted(valued, key=len, reverse=True))
    return r"(?:[ \t]+(?:(?:" + names + r")[ \t]+[^\s\x00]{1,256}+|-[^\s\x00]{1,256}+))*+"


# One positional item (not a flag, nor a separator word) of a command line.
_ITEM = r"[ \t]+(?!" + _SEPARATOR_WORD + r")[^\s\x00-][^\s\x00]{0,4095}+"
_PATH = r"(?:[^\s\x00/]{0,255}+/){0,32}+"  # a program's directory: /usr/bin/
# Programs that run the command after them: "sudo -u app isql ..." is isql's line, as the argv
# form reads it.
_WRAPPERS = (
    "sudo", "doas", "env", "nice", "ionice", "nohup", "timeout", "time", "stdbuf", "chrt", "taskset",
    "setsid", "runuser", "chroot", "exec", "docker", "podman", "nerdctl", "kubectl",
)  # fmt: skip
# The columns ps prints before a command (a line of `ps -ef`, `ps aux`, `ps -o pid,args` or
# `pgrep -a`), each column's own shape: a user, numbers, a start time (10:00, Jan01, 2023), a
# terminal (?, pts/0, tty1), a state (Ssl+), a CPU time ([DD-]HH:MM:SS, MMM:SS); then a tree
# branch ("\_ ") of `ps -ef --forest` or `ps auxf`. A lone PID is right-aligned by ps (blanks
# first) or, from pgrep, at least 3 digits: "3 isql sessions ..." at a line's start is prose.
_PS_USER = r"[\w.+$-]{1,32}+"
_PS_START = r"[ \t]+[\w:]{1,10}+"
_PS_TTY = r"[ \t]+(?:\?{1,2}|[A-Za-z][\w/.-]{0,31}+)"
_PS_TIME = r"[ \t]+(?:\d{1,6}-)?\d{1,6}:\d\d(?::\d\d)?"
_PS_COLUMNS = (
    r"(?:[ \t]{0,16}+(?:"
    # ps -ef: UID PID PPID C STIME TTY TIME
    + _PS_USER
    + r"[ \t]+\d{1,10}[ \t]+\d{1,10}[ \t]+\d{1,3}"
    + _PS_START
    + _PS_TTY
    + _PS_TIME
    # ps aux: USER PID %CPU %MEM VSZ RSS TTY STAT START TIME
    + r"|"
    + _PS_USER
    + r"[ \t]+\d{1,10}[ \t]+\d{1,4}\.\d[ \t]+\d{1,3}\.\d[ \t]+\d{1,12}[ \t]+\d{1,12}"
    + _PS_TTY
    + r"[ \t]+[A-Za-z<+]{1,8}"
    + _PS_START
    + _PS_TIME
    + r")|[ \t]{1,16}+\d{1,10}|\d{3,10})"
    + r"[ \t]{1,64}+(?:[ \t|]{0,256}+\\_[ \t]{1,16}+)?"
)
# An ISO 8601 time a CI log puts before each line: GitHub Actions' 2024-05-01T10:00:00.1234567Z,
# Jenkins' timestamper's [2024-05-01T10:00:00.123Z].
_ISO_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9}+)?(?:Z|[+-]\d\d(?::?\d\d)?)?"
_LOG_TIME = r"(?:" + _ISO_TIME + r"|\[" + _ISO_TIME + r"\])[ \t]{1,16}+"
# What a shell's xtrace (set -x) prints before each command it runs, maybe after a CI log's
# time: bash's "+ ", one "+" more per level of nesting ("++ " in a command substitution);
# zsh's PS4 '+%N:%i> ', the script or function and the line ("+deploy.sh:12> ").
_XTRACE = r"(?:" + _LOG_TIME + r")?(?:\+{1,32}+ |\+[^\s\x00:>]{1,256}+:\d{1,9}+> )"
# What `history` prints before a command: bash's "%5d%c %s%s" (the number right-aligned in five
# columns, "*" after an entry edited since, then HISTTIMEFORMAT's time when set: "%F %T ",
# "%d/%m/%y %T ", maybe bracketed), zsh's alike (history -i: "2024-05-01 10:00  "). The
# number's exact columns: "3 isql sessions ..." at a line's start is prose.
_HISTORY_TIME = r"\[?(?:\d{4}-\d\d-\d\d|\d{1,2}[/.]\d{1,2}[/.]\d{2,4})[ T]\d\d:\d\d(?::\d\d)?\]?[ \t]{1,16}+"
_HISTORY = r"(?: {4}\d| {3}\d\d| {2}\d{3}| \d{4}|\d{5,10}+)[ *] (?:" + _HISTORY_TIME + ")?"
# A command run before another, a ";" glued to its last word ("cd /srv; isql ...", "cd
# /srv;isql ..."): cd or pushd DIR, or a builtin whose first item has a command's shape
# (export A=1, set -e, source ~/.env, . ./env.sh, umask 077, sleep 5). A word before a glued
# ";" is no command start: "notes; isql is ...", "open source tools; isql is ..." are prose.
_SETUP_COMMAND = (
    r"(?<![^\s\x00\"'(])(?:cd|pushd|(?:export|set|source|\.|umask|ulimit|sleep)"
    r"(?=[ \t]+[^\s\x00;=/~$.0-9+-]{0,256}+[=/~$.0-9+-]))"
    r"(?:[ \t]+[^\s\x00;]{1,4096}+){1,16}+;[ \t]{0,16}+"
)
# A piece of a word of a command line: a character or a quoted string ('a; b' holds no separator).
_SHELL_PIECE = r"(?:[^\s\x00;\"']|\"[^\"\r\n\x00]{0,256}+\"|'[^'\r\n\x00]{0,256}+')"
# Commands at a command's start before a ";" glued to their last word ("date; isql ...", "cd /srv;
# ls; isql ..."): one that takes no argument but flags or paths (date +%F, ls -l /srv), or echo
# and its words. Only there: "set the date; isql is ..." and "we echo start; ..." are prose.
_LEADING_COMMANDS = (
    r"(?:(?:(?:date|ls|pwd|true|false|clear|whoami|hostname|uptime)"
    r"(?:[ \t]{1,16}+[-+/~.$]" + _SHELL_PIECE + r"{0,256}+){0,16}+"
    r"|echo(?:[ \t]{1,16}+" + _SHELL_PIECE + r"{1,256}+){0,16}+);[ \t]{0,16}+){0,8}+"
)
# The start of a command (not prose): a line's start (maybe after ps's columns, xtrace's "+ "
# or history's number), a separator word's end ("cd /x && isql ...") or a known command's glued
# ";"; maybe commands without arguments glued to a ";" ("date; "), then maybe a wrapper and up to
# 8 of its items, then the program's directory: "isql", "sudo -u app /usr/bin/isql", "timeout 30
# isql".
_COMMAND_START = (
    r"(?:(?<![^\n\x00])(?:"
    + _PS_COLUMNS
    + "|"
    + _XTRACE
    + "|"
    + _HISTORY
    + r")?|(?:(?<=[ \t]&&)|(?<=[ \t]\|\|)|(?<=[ \t][;|]))[ \t]{1,16}+|"
    + _SETUP_COMMAND
    + r")"
    + _LEADING_COMMANDS
    + r"(?:"
    + _PATH
    + "(?:"
    + "|".join(_WRAPPERS)
    + r")(?:[ \t]+[^\s\x00]{1,256}+){0,8}?[ \t]+)?"
    + _PATH
)


# sshpass's own options before the -p that a match ends with: its options end at the program it
# runs ("sshpass -p PW ssh -p 2222 host": ssh's -p is a port). -f FILE, -d FD, -P PROMPT and an
# earlier -p PW (hidden in a pass before) take a value; a flag is never read as one.
_SSHPASS_OPTIONS = (
    r"(?:[ \t]+(?:-[fdPp][ \t]*+[^\s\x00-][^\s\x00]{0,4095}+|-[^\s\x00fdPp][^\s\x00]{0,255}+)){0,16}?"
)
# vault login's items before its token, at the start of a command: flags (a valued one with its
# value), NAME=VALUE pairs and items hidden in a pass before. As the argv form reads it, every
# item after them is a token too: "vault login TOKEN extra".
_VAULT_BEFORE_TOKEN = (
    r"(?:[ \t]+(?:(?:"
    + "|".join(re.escape(name) for name in sorted(VAULT_VALUED, key=len, reverse=True))
    + r")[ \t]+[^\s\x00]{1,4096}+|-[^\s\x00]{0,4096}+|[^\s\x00=\[]{0,4096}+[=\[][^\s\x00]{0,4096}+))*+"
)
# A token (not a NAME=VALUE pair, not hidden in part already: hvs.[REDACTED]); a word ending
# with ":" or "," is prose ("vault login failed: permission denied").
_VAULT_TOKEN = r"[ \t]+[^\s\x00\"'=\[-][^\s\x00\"'=\[]{0,4095}+(?<![:,])(?![^\s\x00])"
# A token by its shape (hvs., hvb., hvr.; before Vault 1.10 s., b., r.; before 1.0 a UUID), maybe
# with a separator glued to it: a token wherever it is, more words after it or not.
_VAULT_TOKEN_SHAPE = (
    r"[ \t]+(?:(?:hv[sbr]|[sbr])\.[A-Za-z0-9_-]{16,4096}+(?:\.[A-Za-z0-9]{1,64}+)?"
    r"|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})(?:;|&&|\|\|?)?(?![^\s\x00])"
)
# A token whose command ends at a separator glued to it, whatever follows ("TOKEN;vault status").
_VAULT_TOKEN_GLUED = r"[ \t]+[^\s\x00\"'=\[;&|-][^\s\x00\"'=\[;&|]{0,4095}+(?:;|&&|\|)"
# The end of a command after its last item: the text's or a line's end, a separator word, or a
# separator glued to that item ("vault login TOKEN; vault status").
_COMMAND_END = r"(?:[ \t]*(?:\r?\n|\x00|\Z)|[ \t]+" + _SEPARATOR_WORD + "|" + _GLUED_SEPARATOR + ")"
# The flags before a kickstart file's rootpw password (--iscrypted, --plaintext, --allow-ssh).
_DIRECTIVE_FLAGS = r"(?:[ \t]+--[a-z][a-z-]{0,31}+(?![^\s\x00]))*+"


def _basic_credentials(match: re.Match[str]) -> bool:
    """True when the value decodes to printable ``user:password`` text (HTTP Basic)."""
    value = match["value"]
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    _, colon, password = decoded.partition(":")
    return bool(colon and password) and decoded.isprintable()


@dataclass(frozen=True)
class ShapeRule:
    """A secret recognised by its shape. Only the ``value`` group is redacted (the whole
    match when there is none), or each ``inner`` value inside it; ``check`` may reject a
    match; ``gate`` must pass first."""

    name: str
    pattern: re.Pattern[str]
    gate: Callable[[str, str], bool]
    check: Callable[[re.Match[str]], bool] | None = None
    # When the value holds several secrets (ACL SETUSER bob >PW1 >PW2): each value of this
    # pattern inside it is redacted instead.
    inner: re.Pattern[str] | None = None
    # When a match holds one value but its program may pass several (curl -u a:PW1 --proxy-user
    # b:PW2): the rule runs again on the lines where it found one (`matches_on_lines`) until it
    # finds nothing more; a value hidden already is not matched, so it reaches the one after it.
    again: bool = False
    # `pattern` matched at its first place on a line from a position on (for `again`).
    _on_line: re.Pattern[str] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.again:
            # The lazy run stays on one line: a search from a line's start ends with that line
            # and costs what `finditer` over it does.
            object.__setattr__(self, "_on_line", re.compile(r"[^\n\x00]*?(?:" + self.pattern.pattern + ")"))

    def matches(self, text: str, lower: str) -> Iterator[re.Match[str]]:
        """The secrets in ``text``; ``lower`` (for the gate) is ``text`` or its input lowercased."""
        if not self.gate(text, lower):
            return
        for match in self.pattern.finditer(text):
            if self.check is None or self.check(match):
                yield match

    def matches_on_lines(self, text: str, starts: list[int]) -> Iterator[re.Match[str]]:
        """The secrets starting on the lines (between newlines and NULs) that hold ``starts``
        (ascending offsets): where a further value of an `again` rule can be, as its program's
        name, flags and the value hidden before it are on one line."""
        assert self._on_line is not None  # an `again` rule
        done = 0  # where the lines searched so far end
        for start in starts:
            if start < done:
                continue
            position = max(text.rfind("\n", 0, start), text.rfind("\x00", 0, start)) + 1
            while (match := self._on_line.match(text, position)) is not None:
                position = match.end()
                if self.check is None or self.check(match):
                    yield match
            line_end = _LINE_END.search(text, start)
            done = max(position, line_end.start() if line_end else len(text))


# The most passes of an `again` rule: each further value lies within 200 characters of its
# program's name, after a value hidden in an earlier pass (" -p[REDACTED]" is 13 characters).
AGAIN_PASSES = 32
_LINE_END = re.compile(r"[\n\x00]")


def _contains(*needles: str) -> Callable[[str, str], bool]:
    return lambda text, lower: any(needle in text for needle in needles)


def _contains_folded(*needles: str) -> Callable[[str, str], bool]:
    return lambda text, lower: any(needle in lower for needle in needles)


def _long_with(char: str, min_chars: int = 15) -> Callable[[str, str], bool]:
    return lambda text, lower: len(text) >= min_chars and char in text


# The gate of program_password_flag: "-P" for zip, unzip, ipmitool, sqlcmd, bcp and the
# mosquitto clients (one needle, not six); "net " for samba's net.
_FLAG_PROGRAMS = (
    "redis-cli", "sshpass", "mongo", "ldap", "curl", "login", "smb", "rpcclient", "net ", "lftp", "etcdctl",
    "-P", "7z", "rar", "freerdp", "rdesktop", "ncftp", "openssl", "ETCDCTL_USER",
)  # fmt: skip
# The gate of program_password_word: "alias" and "mc " for mc, "aws_se" for aws.
_WORD_PROGRAMS = (
    "redis-cli", "rabbitmqctl", "nmcli", "aws_se", "mysqladmin", "alias", "mc ", "mc\t", "mcli", "vault",
    "isql", "iusql",
)  # fmt: skip

SHAPE_RULES = (
    # PEM / OpenSSH / PGP private key blocks, to the END line or, when cut short, to the end.
    ShapeRule(
        "private_key_block",
        re.compile(
            r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"[^\x00]*?(?:-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|(?=\x00)|\Z)"
        ),
        _contains("PRIVATE KEY"),
    ),
    # The private half of a PuTTY .ppk file.
    ShapeRule(
        "putty_private_lines",
        re.compile(
            r"Private-Lines:[ \t]*\d+[ \t]*\r?\n"
            + FRESH
            + r"(?P<value>[A-Za-z0-9+/=]+(?:\r?\n[A-Za-z0-9+/=]+)*)(?=\r?\n|\x00|\Z)"
        ),
        _contains("Private-Lines"),
    ),
    # scheme://user:PASSWORD@host for any scheme (postgres, mongodb+srv, redis, amqp, https ...);
    # a password holding "/" or a space when what follows the colon cannot be a port; and
    # a password cut short at the end of the text (unless it reads as a port: http://host:8080).
    ShapeRule(
        "url_password",
        re.compile(
            r"://[^\s\x00:/?#@\"'<>\[\]]*:(?!\[REDACTED\])(?:"
            r"(?P<value>[^\s\x00/?#\"'<>]+)@"
            r"|(?!\d{0,5}(?:[/?#\s\"'<>]|\x00|\Z))(?P<v2>" + _URL_PART + r"(?:[/ ]" + _URL_PART + r"){1,4}+)"
            r"@(?=[\w.-]{1,253}+(?::\d{1,5})?(?:[/?#\s\"'<>,;]|\x00|\Z))"
            r"|(?!\d{1,5}(?:…(?:\[truncated\])?)?(?:\x00|\Z))(?P<v3>[^\s\x00/?#\"'<>@]{1,4096}+)" + CUT + ")"
        ),
        _contains("://"),
    ),
    # Go MySQL DSNs: user:PASSWORD@tcp(host:3306)/db
    ShapeRule(
        "go_dsn_password",
        re.compile(r":" + FRESH + r"(?P<value>[^\s\x00/:]{1,256})@(?:tcp|unix)\("),
        _contains("@tcp(", "@unix("),
    ),
    # JSON Web Tokens, whole.
    ShapeRule(
        "jwt",
        re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
        _contains("eyJ"),
    ),
    # AWS access key ids (AKIA..., ASIA...) and Google API keys (AIza...): the prefix stays.
    ShapeRule(
        "aws_google_key",
        re.compile(
            r"A(?<![A-Za-z0-9]A)(?:(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA)(?P<value>[A-Z0-9]{16})"
            + TOKEN_END
            + r"|Iza(?P<google>[0-9A-Za-z_-]{35}))"
        ),
        _long_with("A", 20),
    ),
    # Tokens whose prefix ends with "_": GitHub, Stripe, npm, Hugging Face, Docker, DigitalOcean, Shopify, Sonde.
    ShapeRule(
        "underscore_token",
        re.compile(
            r"_(?:"
            r"(?<=gh[pousr]_)(?<![\w-]gh[pousr]_)(?P<value>[A-Za-z0-9]{36,255})"
            r"|(?<=github_pat_)(?<![\w-]github_pat_)(?P<v2>[A-Za-z0-9_]{22,255})"
            r"|(?<=[sr]k_live_|[sr]k_test_)(?<![\w-][sr]k_live_|[\w-][sr]k_test_)(?P<v3>[A-Za-z0-9]{16,})"
            r"|(?<=whsec_)(?<![\w-]whsec_)(?P<v4>[A-Za-z0-9]{24,})"
            r"|(?<=npm_)(?<![\w-]npm_)(?P<v5>[A-Za-z0-9]{36})"
            r"|(?<=hf_)(?<![\w-]hf_)(?P<v6>[A-Za-z0-9]{34,})"
            r"|(?<=dckr_pat_)(?<![\w-]dckr_pat_)(?P<v7>[A-Za-z0-9_-]{20,})"
            r"|(?<=do[opr]_v1_)(?<![\w-]do[opr]_v1_)(?P<v8>[a-f0-9]{64})"
            r"|(?<=shp(?:at|ss|ca|pa)_)(?<![\w-]shp(?:at|ss|ca|pa)_)(?P<v9>[a-fA-F0-9]{32})"
            # Sonde's own: API keys (32 bytes) and enrollment tokens (24 bytes), base64url
            r"|(?<=sonde_)(?<![\w-]sonde_)(?P<v10>[A-Za-z0-9_-]{43})(?![A-Za-z0-9_-])"
            r"|(?<=enr_)(?<![\w-]enr_)(?P<v11>[A-Za-z0-9_-]{32})(?![A-Za-z0-9_-])"
            r")"
        ),
        _long_with("_"),
    ),
    # Tokens whose prefix ends with "-": GitLab, Slack, OpenAI/Anthropic, PyPI.
    ShapeRule(
        "dash_token",
        re.compile(
            r"-(?:"
            r"(?:(?<=glpat-|glptt-|gloas-)(?<![\w-]glpat-|[\w-]glptt-|[\w-]gloas-)"
            r"|(?<=glrt-|gldt-)(?<![\w-]glrt-|[\w-]gldt-)|(?<=glcbt-)(?<![\w-]glcbt-))"
            r"(?P<value>[A-Za-z0-9_-]{20,})"
            r"|(?<=xox[abposr]-)(?<![\w-]xox[abposr]-)(?P<v2>[A-Za-z0-9-]{10,})"
            r"|(?<=sk-)(?<![\w-]sk-)(?P<v3>(?:proj-|ant-[a-z]{3,5}\d\d-)?[A-Za-z0-9_-]{20,})"
            r"|(?<=pypi-)(?<![\w-]pypi-)(?P<v4>AgE[A-Za-z0-9_-]{50,})"
            r")"
        ),
        _long_with("-"),
    ),
    # Tokens whose prefix ends with ".": Google OAuth, HashiCorp Vault, SendGrid.
    ShapeRule(
        "dot_token",
        re.compile(
            r"\.(?:"
            r"(?<=ya29\.)(?<![\w-]ya29\.)(?P<value>[0-9A-Za-z_-]{20,})"
            r"|(?<=hv[sb]\.)(?<![\w-]hv[sb]\.)(?P<v2>[A-Za-z0-9_-]{24,})"
            r"|(?<=SG\.)(?<![\w-]SG\.)(?P<v3>[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})"
            r")"
        ),
        _long_with("."),
    ),
    # Slack incoming webhooks: the path is the credential.
    ShapeRule(
        "slack_webhook",
        re.compile(r"hooks\.slack\.com/services/" + FRESH + r"(?P<value>[A-Za-z0-9/]+)"),
        _contains("hooks.slack.com/services/"),
    ),
    # Signed-URL query parameters: Azure SAS sig=, S3/GCS presigned signatures, credentials and tokens.
    ShapeRule(
        "signed_url_query",
        re.compile(
            r"[?&;](?i:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token"
            r"|x-amz-credential|x-goog-credential)=" + FRESH + r"(?P<value>[^&\s\x00\"'#<>]+)"
        ),
        _contains_folded("sig=", "signature=", "x-amz-", "x-goog-"),
    ),
    # "Bearer <token>"; the token must hold a digit so "Bearer authentication" survives.
    ShapeRule(
        "bearer",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:earer)[ \t]+"
            + FRESH
            + r"(?P<value>(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*)"
        ),
        _contains_folded("bearer"),
    ),
    # "Basic <base64 of user:password>", checked by decoding.
    ShapeRule(
        "basic",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:asic)[ \t]+" + FRESH + r"(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"
        ),
        _contains_folded("basic"),
        _basic_credentials,
    ),
    # Config directives without a separator, at the start of a line (maybe indented, maybe
    # commented out with "#" or "# ": a directive put aside still holds a password): redis.conf's
    # requirepass, masterauth (one word, maybe quoted; commented out, the line's only word:
    # "# requirepass is not set by default" is prose); nslcd.conf's bindpw and rootpwmodpw (in
    # any case, as nslcd reads its keywords), nss-ldapd's rootbindpw, pam_ldap.conf's
    # (libnss-ldap's) bindpw, slapd.conf's rootpw (a {SSHA} hash too: it can be cracked) and a
    # kickstart file's rootpw [--iscrypted] PW: the rest of the line, as nslcd and pam_ldap read
    # it ("rootpw --lock" gives none), so prose after such a word at a line's start, commented
    # out or not, is hidden too.
    ShapeRule(
        "config_directive",
        re.compile(
            r"(?<![^\n\x00])[ \t]*(?:(?i:requirepass|masterauth)[ \t]+"
            + FRESH
            + r"(?P<value>"
            + QUOTED
            + r"|[^\s\x00\"']+)|#[ \t]?(?i:requirepass|masterauth)[ \t]+"
            + FRESH
            + r"(?P<v3>"
            + QUOTED
            + r"|[^\s\x00\"']{1,4096}+)(?=[ \t]*+(?:\r?\n|\x00|\Z))"
            + r"|(?:#[ \t]?)?(?i:bindpw|rootpw(?:modpw)?|rootbindpw)"
            + _DIRECTIVE_FLAGS
            + r"[ \t]+"
            + FRESH
            + r"(?P<v2>(?!--)[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?))"
        ),
        _contains_folded("requirepass", "masterauth", "bindpw", "rootpw"),
    ),
    # ~/.netrc: machine HOST login USER password SECRET
    ShapeRule(
        "netrc_password",
        re.compile(r"(?i:login)[ \t]+[^\s\x00]+[ \t]+(?i:password)[ \t]+" + FRESH + r"(?P<value>[^\s\x00]+)"),
        _contains_folded("login"),
    ),
    # The password flags of known programs on a command line (within 200 characters of the
    # program's name, before a separator word: "a && b"): redis-cli -a, sshpass's own -p (before
    # the program it runs), the mongo tools' -p, the ldap tools' -w (ldappasswd's -a OLD, -s NEW;
    # maybe after switches clustered with it: -xw PW, -ZZxwPW),
    # curl's -u/--user/-U/--proxy-user and etcdctl's --user user:SECRET (its ETCDCTL_USER=
    # user:SECRET too: "user" describes a name, so the name rules keep it), docker/podman login
    # -p, the samba tools' (net's too) -U user%SECRET, lftp -u user,SECRET, zip/unzip/ipmitool/
    # sqlcmd/bcp and the mosquitto clients' -P, 7z's and rar's -pSECRET (rar -hpSECRET; -p- is
    # no password), xfreerdp /p:SECRET, rdesktop and the ncftp tools' -p, openssl -k|-K, Sybase
    # isql's and sqsh's -P SECRET|-PSECRET; every one of them on the line. The argv form:
    # sonde.agent.scrub_argv.
    ShapeRule(
        "program_password_flag",
        re.compile(
            r"(?<![\w.-])(?:"
            r"redis-cli" + _REACH + r"{0,200}?[ \t]-a[ \t]+"
            r"|sshpass" + _SSHPASS_OPTIONS + r"[ \t]+-p[ \t]*"
            r"|mongo(?:sh|dump|restore|export|import|stat|top)?" + _REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|ldap(?:passwd(?![a-z])"
            + _REACH
            + r"{0,200}?[ \t]"
            + _LDAPPASSWD_PASSWORD_FLAG
            + r"|(?!passwd(?![a-z]))[a-z]{3,8}"
            + _REACH
            + r"{0,200}?[ \t]"
            + _LDAP_PASSWORD_FLAG
            + r")[ \t]*"
            r"|(?:curl" + _REACH + r"{0,200}?[ \t](?:-[uU][ \t]*|--(?:proxy-)?user(?:[ \t]+|=))"
            r"|etcdctl" + _REACH + r"{0,200}?[ \t]--user(?:[ \t]+|=)"
            r"|ETCDCTL_USER=)"
            r"[\"']?[^\s\x00:\"']{1,256}:"
            r"|(?:(?<=docker )|(?<=podman )|(?<=buildah )|(?<=nerdctl )|(?<=skopeo )|(?<=registry ))"
            r"login" + _REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|(?:smbclient|rpcclient|smbcacls|smbget|smbtree|net(?=[ \t]))" + _REACH + r"{0,200}?[ \t]"
            r"(?:-U[ \t]*|--user(?:[ \t]+|=))[\"']?[^\s\x00%\"']{1,256}%"
            r"|lftp" + _REACH + r"{0,200}?[ \t]-u[ \t]*[\"']?[^\s\x00,\"']{1,256},"
            r"|(?:zip|unzip|ipmitool|sqlcmd|bcp|mosquitto_(?:pub|sub|rr))" + _REACH + r"{0,200}?[ \t]-P[ \t]+"
            r"|7z[arz]?" + _REACH + r"{0,200}?[ \t]-p"
            r"|(?:rar|unrar)(?=[ \t])" + _REACH + r"{0,200}?[ \t]-h?p"
            r"|(?:xfreerdp|wlfreerdp|sdl-freerdp)3?" + _REACH + r"{0,200}?[ \t]/g?p:"
            r"|(?:rdesktop|ncftp(?:get|put|ls|batch)?)(?=[ \t])" + _REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|openssl" + _REACH + r"{0,200}?[ \t]-[kK][ \t]+"
            r"|(?:iu?sql|sqsh)(?=[ \t])" + _REACH + r"{0,200}?[ \t]-P[ \t]*"
            r")" + FRESH + r"(?P<value>" + QUOTED + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095})"
        ),
        _contains(*_FLAG_PROGRAMS),
        again=True,
    ),
    # The password a known program's word announces on a command line (within 200 characters
    # of the program's name, before a separator word, followed by a space: "mysqladmin:
    # [Warning] Using a password on" is a message; not the value of a flag: "redis-cli -h auth
    # ping"): redis-cli AUTH [user] SECRET (HELLO 3 AUTH user SECRET; MIGRATE ... AUTH SECRET
    # KEYS k | AUTH2 user SECRET) and CONFIG SET requirepass|masterauth SECRET, rabbitmqctl
    # add_user|change_password [flags] USER SECRET, nmcli ... password|wifi-sec.psk SECRET, aws
    # configure set [profile.NAME.]aws_secret_access_key SECRET, mysqladmin password SECRET, mc
    # alias set NAME URL ACCESSKEY SECRET, mc admin user add ALIAS ACCESSKEY SECRET and mc config
    # host add ALIAS URL ACCESSKEY SECRET, vault login [flags] TOKEN [flags] (the last item of its
    # command but flags, or one with a token's shape: "ran: vault login s.X -no-print now"; at the
    # start of a command every item but flags and NAME=VALUE pairs, as the argv form reads it:
    # vault login TOKEN extra; never a word ending with ":": "vault login failed: ..."), and
    # unixODBC's isql DSN USER SECRET (at the start of a command: a line's start, maybe after ps's
    # columns, xtrace's "+ " (zsh's "+NAME:LINE> ", maybe after a CI log's time) or history's
    # number and time, after a separator word or a known command's glued ";" (cd /srv; isql ...),
    # maybe after commands without arguments glued to a ";" (date; ls; isql ...); maybe after
    # sudo, timeout N ...: "the isql client" is prose). Every one of a program's words on the line.
    ShapeRule(
        "program_password_word",
        re.compile(
            r"(?<![\w.-])(?:"
            r"redis-cli" + _LATER + r"(?<![ \t]-[hpsaunridDt][ \t])(?:(?i:auth2)[ \t]+[^\s\x00]{1,256}+"
            # a user before the password, unless a separator glued to it ends the command there
            # ("AUTH PW; echo ok": a pass after reads "AUTH [REDACTED] echo" as user and password,
            # hiding "echo" too: over-redaction, not a leak)
            r"|(?i:auth)(?:[ \t]+[^\s\x00]{1,256}+"
            + _NOT_GLUED_SEPARATOR
            + r"(?=[ \t]+(?!(?i:keys)(?![^\s\x00]))[^\s\x00-]))?+"
            r"|(?i:requirepass|masterauth))"
            r"|rabbitmqctl"
            + _LATER
            + r"(?:add_user|change_password|authenticate_user)"
            + _flags_then(RABBITMQCTL_VALUED)
            + _ITEM
            + _flags_then(RABBITMQCTL_VALUED)
            + r"|nmcli"
            + _LATER
            + r"(?:[\w-]{1,64}\.)?"
            r"(?:password|psk|leap-password|(?:phase2-)?private-key-password|pin|wep-key[0-3])"
            r"|aws" + _LATER + r"(?:[\w-]{1,64}\.){0,3}(?:aws_secret_access_key|aws_session_token)"
            r"|mysqladmin" + _LATER + r"password"
            r"|mc(?:li)?"
            + _LATER
            + r"(?:alias[ \t]+set"
            + (_flags_then(MC_VALUED) + _ITEM) * 3
            + _flags_then(MC_VALUED)
            + r"|user[ \t]+add"
            + (_flags_then(MC_VALUED) + _ITEM) * 2
            + _flags_then(MC_VALUED)
            + r"|host[ \t]+add"
            + (_flags_then(MC_VALUED) + _ITEM) * 3
            + _flags_then(MC_VALUED)
            + r")|vault[ \t]+login"
            + _flags_then(VAULT_VALUED)
            # the token has a token's shape, or is the last item of its command but flags
            + r"(?="
            + _VAULT_TOKEN_SHAPE
            + "|"
            + _VAULT_TOKEN_GLUED
            + "|"
            + _VAULT_TOKEN
            + _flags_then(VAULT_VALUED)
            + _COMMAND_END
            + r")|"
            + _COMMAND_START
            + r"(?:vault[ \t]+login"
            + _VAULT_BEFORE_TOKEN
            + r"(?="
            + _VAULT_TOKEN
            + r")|iu?sql(?=[ \t])"
            + (_flags_then(ISQL_VALUED) + _ITEM) * 2
            + _flags_then(ISQL_VALUED)
            + r"))[ \t]+"
            + FRESH
            + r"(?!"
            + _SEPARATOR_WORD
            + r")(?P<value>"
            + QUOTED
            + r"|[^\s\x00\"'=-][^\s\x00\"']{0,4095})"
        ),
        _contains(*_WORD_PROGRAMS),
        again=True,
    ),
    # The snmp tools' -A AUTHPASS, -X PRIVPASS and -c COMMUNITY (all of them in its command; the
    # default community "public" too: a community is a password). snmpd's -c is its config file.
    ShapeRule(
        "snmp_secrets",
        re.compile(
            r"snmp(?<![\w.-]snmp)(?:get(?:next)?|bulk(?:get|walk)|walk|set|trap|inform|table|delta|df|status"
            r"|test|netstat|usm|vacm)(?P<value>[ \t]" + _REACH + r"{1,8192}+)"
        ),
        _contains("snmp"),
        inner=re.compile(
            r"(?<![^ \t])-[AXc][ \t]*"
            + FRESH
            + r"(?P<value>"
            + QUOTED
            + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095})"
        ),
    ),
    # redis-cli ACL SETUSER user [rules]: every >SECRET (a password added) and <SECRET (one
    # removed) in its command; a #hash stays.
    ShapeRule(
        "redis_acl_passwords",
        re.compile(
            r"redis-cli(?<![\w.-]redis-cli)"
            + _LATER
            + r"(?i:acl)[ \t]+(?i:setuser)(?P<value>[ \t]"
            + _REACH
            + r"{1,8192}+)"
        ),
        _contains_folded("setuser"),
        inner=re.compile(r"(?<![^ \t])[<>]" + FRESH + r"(?P<value>[^\s\x00]{1,4096}+)"),
    ),
    # mysql -pSECRET on a command line (within 200 characters, before any other mysql or a separator
    # word); each of them.
    ShapeRule(
        "mysql_p",
        re.compile(
            r"(?:mysql(?<![\w-]mysql)|mariadb(?<![\w-]mariadb))[\w-]*+"
            r"(?:[^\r\n\x00 \tm]|m(?!ysql|ariadb)|[ \t](?!"
            + _REACH_SEPARATOR
            + r"[ \t])){0,200}?[ \t]-p"
            + FRESH
            + r"(?P<value>[^\s\x00\"']+)"
        ),
        _contains("mysql", "mariadb"),
        again=True,
    ),
    # Passwords in SQL statements (pg_stat_activity, the MySQL process list, logs): PostgreSQL's
    # [ENCRYPTED] PASSWORD '...', MySQL's IDENTIFIED [WITH plugin] BY|AS '...', PASSWORD('...'),
    # SET PASSWORD FOR user = '...'.
    ShapeRule(
        "sql_password",
        re.compile(
            r"(?<![\w$])(?:"
            r"(?i:password)(?:" + _SQL_WS + r"|[ \t]*\([ \t]*)"
            r"|(?i:identified)(?:"
            + _SQL_WS
            + r"(?i:with)"
            + _SQL_WS
            + r"[\w'\"`]{1,64}+)?"
            + _SQL_WS
            + r"(?i:by|as)"
            + _SQL_WS
            + r"(?:(?i:password)"
            + _SQL_WS
            + r")?"
            r"|(?i:set[ \t]+password[ \t]+for)[ \t]+[^=\r\n\x00]{1,200}?=[ \t]*(?:(?i:password)[ \t]*\([ \t]*)?"
            r")" + SQL_STRING
        ),
        _contains_folded("password", "identified"),
    ),
    # Oracle logins: jdbc:oracle:thin:USER/PASSWORD@host, sqlplus USER/PASSWORD@db (and its kin);
    # a double-quoted password may hold "@" and spaces: scott/"p@ss word"@db.
    ShapeRule(
        "oracle_login",
        re.compile(
            r"(?:(?i:jdbc:oracle:)[a-z]{1,10}:@?"
            r"|(?<![\w.-])(?:sqlplus|sqlldr|expdp|impdp|rman|dgmgrl)(?:[ \t]+-[A-Za-z]{1,10})*+[ \t]+"
            r"(?:userid=|(?i:target|catalog|auxiliary)=|(?i:target)[ \t]+)?)"
            r"[^\s\x00/@\"'():=]{1,128}+/"
            + FRESH
            + r"(?P<value>\"[^\"\r\n\x00]{1,256}+\"|[^\s\x00@\"']{1,256}+)(?:@|(?=[\s\"'])|"
            + CUT
            + ")"
        ),
        _contains_folded("sqlplus", "oracle:", "sqlldr", "expdp", "impdp", "rman", "dgmgrl"),
    ),
    # rman's other logons in its command: target|catalog|auxiliary USER/SECRET[@db] (or =USER/...).
    ShapeRule(
        "rman_logons",
        re.compile(r"rman(?<![\w.-]rman)(?P<value>[ \t]" + _REACH + r"{1,8192}+)"),
        _contains("rman"),
        inner=re.compile(
            r"(?<![\w.-])(?i:target|catalog|auxiliary)(?:[ \t]+|=)[^\s\x00/@\"'():=]{1,128}+/"
            + FRESH
            + r"(?P<value>\"[^\"\r\n\x00]{1,256}+\"|[^\s\x00@\"'/]{1,256}+)(?![^\s\x00@])"
        ),
    ),
    # A ~/.pgpass line: host:port:database:user:PASSWORD (port a number or *).
    ShapeRule(
        "pgpass_line",
        re.compile(
            r"(?<![^\n\x00])(?!\d{1,2}:)[^\s:\x00#\\]{1,253}+:(?:\d{1,5}|\*):[^\s:\x00]{1,63}+:[^\s:\x00]{1,63}+:"
            + FRESH
            + r"(?P<value>(?:[^\r\n:\x00\\]|\\[^\r\n\x00]){1,4096}+)(?=\r?\n|\x00|\Z)"
        ),
        lambda text, lower: _PGPASS_PORT.search(text) is not None,
    ),
    # .NET appSettings: <add key="Password" value="SECRET" />, when the key names a secret.
    ShapeRule(
        "add_key_value",
        re.compile(
            r"<(?i:add)[ \t]+(?i:key)[ \t]*=[ \t]*([\"'])(?P<name>[^\"'<>\x00]{1,200}+)\1[ \t]+(?i:value)[ \t]*=[ \t]*"
            r"([\"'])(?!\[REDACTED\])(?P<value>[^\"'\x00]{1,4096}+)(?:\3|" + CUT + ")"
        ),
        _contains_folded("<add"),
        lambda match: is_secret_name(match["name"]),
    ),
    # Redis commands as the slow log shows them: AUTH [user] PASSWORD, HELLO 3 AUTH user PASSWORD,
    # CONFIG SET requirepass|masterauth PASSWORD (the whole line).
    ShapeRule(
        "redis_command_password",
        re.compile(
            r"(?<![^\n\x00])[ \t]*(?:AUTH(?:[ \t]+[^\s\x00]{1,256}+)?|(?i:hello)[ \t]+\d[ \t]+(?i:auth)[ \t]+[^\s\x00]{1,256}+"
            r"|(?i:config[ \t]+set[ \t]+(?:requirepass|masterauth)))[ \t]+"
            + FRESH
            + r"(?P<value>"
            + QUOTED
            + r"|[^\s\x00\"']{1,4096}+)(?=[ \t]*(?:\r?\n|\x00|\Z))"
        ),
        _contains_folded("auth", "config"),
    ),
    # htpasswd -b [FILE] USER PASSWORD (-n: no FILE), mosquitto_passwd -b FILE USER PASSWORD.
    ShapeRule(
        "htpasswd_b",
        re.compile(
            r"(?<![\w.-])(?:htpasswd|mosquitto_passwd)"
            + _HTPASSWD_HAS
            + r"b)(?:"
            + _HTPASSWD_HAS
            + r"n)"
            + _HTPASSWD_OPTS
            + _HTPASSWD_WORD
            + r"[ \t]+"
            + FRESH
            + r"(?P<value>[^\s\x00]{1,4096}+)"
            r"|(?!"
            + _HTPASSWD_HAS[3:]
            + r"n)"
            + _HTPASSWD_OPTS
            + _HTPASSWD_WORD
            + _HTPASSWD_WORD
            + r"[ \t]+"
            + FRESH
            + r"(?P<v2>[^\s\x00]{1,4096}+))"
        ),
        _contains("htpasswd", "mosquitto_passwd"),
    ),
)

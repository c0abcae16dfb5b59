"""The scrubber's secrets recognised by their shape.

Each `ShapeRule` is a pattern for one kind of secret (a private key block, a
vendor token, a URL password, a program's password flag ...) behind a cheap
gate; `sonde.agent.scrub_rules` runs them, with the rules keyed by a field
name, in `scrub_text`. Only a rule's value group is redacted (the whole match
when it has none), or, for a rule with an ``inner`` pattern, each of its values
inside that group (every ``>PW`` after ``ACL SETUSER``, every logon on an
``rman`` line). Every pattern starts with a literal or a rare character
so the regex engine skips from one candidate to the next, and every
repetition is bounded: hostile text scrubs in linear time. The program rules are written
in the command-line grammar of `sonde.agent.scrub_commands`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sonde.agent.scrub_commands import (
    COMMAND_END,
    COMMAND_START,
    ECHOED,
    ISQL_VALUED,
    ITEM,
    LATER,
    LDAP_PASSWORD_FLAG,
    LDAPPASSWD_PASSWORD_FLAG,
    MC_VALUED,
    NOT_GLUED_SEPARATOR,
    RABBITMQCTL_VALUED,
    REACH,
    REACH_SEPARATOR,
    SEPARATOR_WORD,
    SSHPASS_OPTIONS,
    VAULT_BEFORE_TOKEN,
    VAULT_TOKEN,
    VAULT_TOKEN_GLUED,
    VAULT_TOKEN_SHAPE,
    VAULT_VALUED,
    flags_then,
)
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
# The flags before a kickstart file's rootpw password (--iscrypted, --plaintext, --allow-ssh).
_DIRECTIVE_FLAGS = r"(?:[ \t]+--[a-z][a-z-]{0,31}+(?![^\s\x00]))*+"
# What comments a directive out: "#", "##", "#  ", an ini file's ";" or "; ".
_COMMENTED = r"[#;][#; \t]{0,16}+"
# A debconf answer whose type is "password", before its value: OWNER QUESTION password (the owner
# a package name or d-i, the question PACKAGE/NAME: "the mysql-server/root_password password is
# ..." at a line's start reads as one all the same).
_DEBCONF_PASSWORD = (
    r"[a-z0-9][a-z0-9.+-]{0,127}+[ \t]{1,64}+[\w.+-]{1,128}+/[\w./+-]{1,256}+[ \t]{1,64}+password[ \t]{1,64}+"
    + FRESH
)


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
    # commented out: "#", "# ", "#  ", "##", an ini file's ";": a directive put aside still holds
    # a password): redis.conf's requirepass, masterauth (one word, maybe quoted; commented out,
    # the line's only word: "# requirepass is not set by default" is prose); nslcd.conf's bindpw
    # and rootpwmodpw (in any case, as nslcd reads its keywords), nss-ldapd's rootbindpw, pam_ldap.conf's
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
            + r"|[^\s\x00\"']+)|"
            + _COMMENTED
            + r"(?i:requirepass|masterauth)[ \t]+"
            + FRESH
            + r"(?P<v3>"
            + QUOTED
            + r"|[^\s\x00\"']{1,4096}+)(?=[ \t]*+(?:\r?\n|\x00|\Z))"
            + r"|(?:"
            + _COMMENTED
            + r")?(?i:bindpw|rootpw(?:modpw)?|rootbindpw)"
            + _DIRECTIVE_FLAGS
            + r"[ \t]+"
            + FRESH
            + r"(?P<v2>(?!--)[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?))"
        ),
        _contains_folded("requirepass", "masterauth", "bindpw", "rootpw"),
    ),
    # debconf answers of type "password" (whatever the question is called; not string, boolean,
    # select ...): OWNER QUESTION password VALUE as debconf-get-selections prints them (TABs) and a
    # preseed file, a here-document or debconf-set-selections reads them, at a line's start (maybe
    # indented or commented out: example-preseed.txt's "#d-i passwd/root-password password r00tme"),
    # the rest of the line (debconf reads it so); or after echo or "<<<" (echo "..." |
    # debconf-set-selections), to the closing quote or, unquoted, one word.
    ShapeRule(
        "debconf_password",
        re.compile(
            r"(?<![^\n\x00])[ \t]{0,64}+(?:#[#; \t]{0,16}+)?"
            + _DEBCONF_PASSWORD
            + r"(?P<value>[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?)|"
            + ECHOED
            + r"(?:\""
            + _DEBCONF_PASSWORD
            + r"(?P<v2>[^\"\s\x00][^\"\r\n\x00]{0,4095}+)|'"
            + _DEBCONF_PASSWORD
            + r"(?P<v3>[^'\s\x00][^'\r\n\x00]{0,4095}+)|"
            + _DEBCONF_PASSWORD
            + r"(?P<v4>[^\s\x00\"'|;&<>]{1,4096}+))"
        ),
        _contains("password"),
    ),
    # debconf's database (passwords.dat; config.dat alike): a record per question, "Name:" first,
    # then "Template:", "Value:" (one line), "Owners:" ..., a blank line after it. Its value is
    # hidden when the question's own name (after "PACKAGE/") or its template's is a secret name:
    # passwords.dat does not say a record's type, and config.dat's passwd/user-fullname is no
    # secret although "passwd/" names one.
    ShapeRule(
        "debconf_db_value",
        re.compile(
            r"(?<![^\n\x00])Name:[ \t]?(?P<name>[^\s\x00]{1,256}+)[ \t]{0,16}+\r?\n"
            r"(?:Template:[ \t]?(?P<template>[^\s\x00]{1,256}+)[ \t]{0,16}+\r?\n)?+"
            # the record's other lines before its value (none in debconf's own files)
            r"(?:(?!Value:)[^\s\x00][^\r\n\x00]{0,4095}+\r?\n){0,16}+"
            r"Value:[ \t]?" + FRESH + r"(?P<value>[^\s\x00][^\r\n\x00]{0,4095}+)"
        ),
        lambda text, lower: "Value:" in text and "Name:" in text,
        lambda match: any(
            is_secret_name(question.rpartition("/")[2])
            for question in (match["name"], match["template"])
            if question is not None
        ),
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
            r"redis-cli" + REACH + r"{0,200}?[ \t]-a[ \t]+"
            r"|sshpass" + SSHPASS_OPTIONS + r"[ \t]+-p[ \t]*"
            r"|mongo(?:sh|dump|restore|export|import|stat|top)?" + REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|ldap(?:passwd(?![a-z])"
            + REACH
            + r"{0,200}?[ \t]"
            + LDAPPASSWD_PASSWORD_FLAG
            + r"|(?!passwd(?![a-z]))[a-z]{3,8}"
            + REACH
            + r"{0,200}?[ \t]"
            + LDAP_PASSWORD_FLAG
            + r")[ \t]*"
            r"|(?:curl" + REACH + r"{0,200}?[ \t](?:-[uU][ \t]*|--(?:proxy-)?user(?:[ \t]+|=))"
            r"|etcdctl" + REACH + r"{0,200}?[ \t]--user(?:[ \t]+|=)"
            r"|ETCDCTL_USER=)"
            r"[\"']?[^\s\x00:\"']{1,256}:"
            r"|(?:(?<=docker )|(?<=podman )|(?<=buildah )|(?<=nerdctl )|(?<=skopeo )|(?<=registry ))"
            r"login" + REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|(?:smbclient|rpcclient|smbcacls|smbget|smbtree|net(?=[ \t]))" + REACH + r"{0,200}?[ \t]"
            r"(?:-U[ \t]*|--user(?:[ \t]+|=))[\"']?[^\s\x00%\"']{1,256}%"
            r"|lftp" + REACH + r"{0,200}?[ \t]-u[ \t]*[\"']?[^\s\x00,\"']{1,256},"
            r"|(?:zip|unzip|ipmitool|sqlcmd|bcp|mosquitto_(?:pub|sub|rr))" + REACH + r"{0,200}?[ \t]-P[ \t]+"
            r"|7z[arz]?" + REACH + r"{0,200}?[ \t]-p"
            r"|(?:rar|unrar)(?=[ \t])" + REACH + r"{0,200}?[ \t]-h?p"
            r"|(?:xfreerdp|wlfreerdp|sdl-freerdp)3?" + REACH + r"{0,200}?[ \t]/g?p:"
            r"|(?:rdesktop|ncftp(?:get|put|ls|batch)?)(?=[ \t])" + REACH + r"{0,200}?[ \t]-p[ \t]+"
            r"|openssl" + REACH + r"{0,200}?[ \t]-[kK][ \t]+"
            r"|(?:iu?sql|sqsh)(?=[ \t])" + REACH + r"{0,200}?[ \t]-P[ \t]*"
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
            r"redis-cli" + LATER + r"(?<![ \t]-[hpsaunridDt][ \t])(?:(?i:auth2)[ \t]+[^\s\x00]{1,256}+"
            # a user before the password, unless a separator glued to it ends the command there
            # ("AUTH PW; echo ok": a pass after reads "AUTH [REDACTED] echo" as user and password,
            # hiding "echo" too: over-redaction, not a leak)
            r"|(?i:auth)(?:[ \t]+[^\s\x00]{1,256}+"
            + NOT_GLUED_SEPARATOR
            + r"(?=[ \t]+(?!(?i:keys)(?![^\s\x00]))[^\s\x00-]))?+"
            r"|(?i:requirepass|masterauth))"
            r"|rabbitmqctl"
            + LATER
            + r"(?:add_user|change_password|authenticate_user)"
            + flags_then(RABBITMQCTL_VALUED)
            + ITEM
            + flags_then(RABBITMQCTL_VALUED)
            + r"|nmcli"
            + LATER
            + r"(?:[\w-]{1,64}\.)?"
            r"(?:password|psk|leap-password|(?:phase2-)?private-key-password|pin|wep-key[0-3])"
            r"|aws" + LATER + r"(?:[\w-]{1,64}\.){0,3}(?:aws_secret_access_key|aws_session_token)"
            r"|mysqladmin" + LATER + r"password"
            r"|mc(?:li)?"
            + LATER
            + r"(?:alias[ \t]+set"
            + (flags_then(MC_VALUED) + ITEM) * 3
            + flags_then(MC_VALUED)
            + r"|user[ \t]+add"
            + (flags_then(MC_VALUED) + ITEM) * 2
            + flags_then(MC_VALUED)
            + r"|host[ \t]+add"
            + (flags_then(MC_VALUED) + ITEM) * 3
            + flags_then(MC_VALUED)
            + r")|vault[ \t]+login"
            + flags_then(VAULT_VALUED)
            # the token has a token's shape, or is the last item of its command but flags
            + r"(?="
            + VAULT_TOKEN_SHAPE
            + "|"
            + VAULT_TOKEN_GLUED
            + "|"
            + VAULT_TOKEN
            + flags_then(VAULT_VALUED)
            + COMMAND_END
            + r")|"
            + COMMAND_START
            + r"(?:vault[ \t]+login"
            + VAULT_BEFORE_TOKEN
            + r"(?="
            + VAULT_TOKEN
            + r")|iu?sql(?=[ \t])"
            + (flags_then(ISQL_VALUED) + ITEM) * 2
            + flags_then(ISQL_VALUED)
            + r"))[ \t]+"
            + FRESH
            + r"(?!"
            + SEPARATOR_WORD
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
            r"|test|netstat|usm|vacm)(?P<value>[ \t]" + REACH + r"{1,8192}+)"
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
            + LATER
            + r"(?i:acl)[ \t]+(?i:setuser)(?P<value>[ \t]"
            + REACH
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
            + REACH_SEPARATOR
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
        re.compile(r"rman(?<![\w.-]rman)(?P<value>[ \t]" + REACH + r"{1,8192}+)"),
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

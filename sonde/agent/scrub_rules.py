"""The scrubber's text rules: which substrings of a string are secrets.

How it works, and why it is fast: a rule runs on a string only when a cheap
substring test (its *gate*) passes, and each rule's pattern starts with a
literal or a rare character (``-----BEGIN``, ``://``, ``eyJ``, the ``_`` of
``ghp_``, the ``[?&;]`` before ``sig=``), so the regex engine skips from one
candidate to the next without trying every position. The rules keyed by a
field name (``password=x``, ``"apiKey": "x"``, ``--token x``,
``<secret>x</secret>``, ``Authorization: ...``, LDIF's ``userPassword:: BASE64``)
start from the places where a secret-word stem (``pass``, ``token``, ``key`` ...) occurs in the lowercased
string and match anchored at the start of that word; `is_secret_name` then
decides whether the name is secret (a flag that takes no value, `SWITCHES`,
hides nothing after it). The rules keyed by a shape (tokens, key
blocks, URL passwords in `sonde.agent.scrub_shapes`; private keys printed as numbers in
`sonde.agent.scrub_key_text`; configuration files' directives and
records in `sonde.agent.scrub_config_files`; credential files' lines and password hashes in
`sonde.agent.scrub_credential_files`; applications' own (PHP's define, web.xml, fetchmail,
ipsec.secrets) in `sonde.agent.scrub_app_configs`; programs' password flags and words in
`sonde.agent.scrub_programs`, the input of chpasswd and passwd and openssl passwd's plaintexts in
`sonde.agent.scrub_password_tools`) run in the order `SHAPE_RULES` lists them. A name's value may
be percent-encoded, its name bracketed or annotated with a type (`sonde.agent.scrub_assignments`).

Rules run one after the other, each over the output of the one before, and
never match a value that is already ``[REDACTED]``, so a secret is counted
once and scrubbing twice changes nothing more. No rule hides anything across a
NUL (`SEPARATOR`), so the scrubber joins every string of a result with NULs and
scans them in one go: the per-string cost of ~15 rules is paid once. (Only the rules
reading a file named before its lines read on across NULs: a probe's answer gives the path of
debconf's passwords.dat, pppd's chap-secrets ... and the file's lines as strings of their
own.) A redaction replaces only the secret: ``postgres://app:[REDACTED]@db``,
``password="[REDACTED]"``, ``Bearer [REDACTED]``, ``ghp_[REDACTED]``; a private key block is
replaced whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from sonde.agent.scrub_app_configs import (
    ENV_DEFAULT,
    FETCHMAIL_PASSWORD,
    IPSEC_SECRET,
    PHP_DEFINE,
    WEB_XML_PARAM,
)
from sonde.agent.scrub_assignments import (
    ANNOTATED_ASSIGN,
    ENCODED_ASSIGN,
    LDIF_BASE64,
    NAME_START,
    YAML_BLOCK,
    after_percent_byte,
    bracketed_match,
    says_no_secret,
)
from sonde.agent.scrub_config_files import (
    CONFIG_DIRECTIVE,
    DEBCONF_DB_VALUE,
    DEBCONF_PASSWORD,
    DEBCONF_PASSWORDS_DAT_VALUES,
    GOSSIP_ENCRYPT_KEY,
    HAPROXY_PASSWORD,
    IFUPDOWN_WPA_SECRET,
    NETRC_PASSWORD,
    PASSWORD_LINE,
    PGPASS_LINE,
    SNMPD_COMMUNITY,
    SNMPD_CREATE_USER,
    SNMPD_TRAPSESS,
    XML_KEY_VALUE,
)
from sonde.agent.scrub_credential_files import (
    CRYPT_HASH,
    PGBOUNCER_USERLIST_LINE,
    PPP_SECRETS_LINES,
    RSYNCD_SECRETS_LINES,
    SASL_PASSWD_FILE_LINES,
    SASL_PASSWD_LINE,
    SCHEME_HASH_LINE,
)
from sonde.agent.scrub_gates import may_hold
from sonde.agent.scrub_key_text import KEY_TEXT_RULES
from sonde.agent.scrub_password_tools import (
    CHPASSWD_INPUT,
    OPENSSL_PASSWD,
    OPENSSL_PASSWD_AFTER_END,
    PASSWD_STDIN,
)
from sonde.agent.scrub_programs import (
    HTPASSWD_B,
    KUBECTL_SECRET_LITERALS,
    MYSQL_P,
    ORACLE_LOGIN,
    PROGRAM_PASSWORD_FLAG,
    PROGRAM_PASSWORD_WORD,
    REDIS_ACL_PASSWORDS,
    RMAN_LOGONS,
    SNMP_SECRETS,
)
from sonde.agent.scrub_shapes import (
    AGAIN_PASSES,
    BARE,
    CUT,
    FRESH,
    KEY_AND_TOKEN_RULES,
    QUOTED,
    REDIS_COMMAND_PASSWORD,
    SCHEME,
    SQL_PASSWORD,
    ShapeRule,
)
from sonde.agent.secret_names import is_secret_name
from sonde.protocol.names import REDACTED

SEPARATOR = "\x00"  # no rule hides across a NUL: strings joined with it are scrubbed as one text

# The rules keyed by a shape, in the order they run. The order matters: a rule never matches a
# value an earlier one hid, so the first to match decides how a text reads (the key block first:
# `scrub_text` runs it before the rules keyed by a field name, the others after them).
SHAPE_RULES: tuple[ShapeRule, ...] = (
    *KEY_AND_TOKEN_RULES,
    *KEY_TEXT_RULES,
    CONFIG_DIRECTIVE,
    IFUPDOWN_WPA_SECRET,
    SNMPD_COMMUNITY,
    SNMPD_CREATE_USER,
    SNMPD_TRAPSESS,
    HAPROXY_PASSWORD,
    DEBCONF_PASSWORD,
    DEBCONF_DB_VALUE,
    DEBCONF_PASSWORDS_DAT_VALUES,
    NETRC_PASSWORD,
    PROGRAM_PASSWORD_FLAG,
    PROGRAM_PASSWORD_WORD,
    SNMP_SECRETS,
    OPENSSL_PASSWD_AFTER_END,
    OPENSSL_PASSWD,
    REDIS_ACL_PASSWORDS,
    MYSQL_P,
    SQL_PASSWORD,
    ORACLE_LOGIN,
    RMAN_LOGONS,
    PGPASS_LINE,
    XML_KEY_VALUE,
    WEB_XML_PARAM,
    PHP_DEFINE,
    ENV_DEFAULT,
    REDIS_COMMAND_PASSWORD,
    HTPASSWD_B,
    KUBECTL_SECRET_LITERALS,
    CHPASSWD_INPUT,
    PASSWD_STDIN,
    FETCHMAIL_PASSWORD,
    PASSWORD_LINE,
    IPSEC_SECRET,
    GOSSIP_ENCRYPT_KEY,
    SASL_PASSWD_LINE,
    PGBOUNCER_USERLIST_LINE,
    PPP_SECRETS_LINES,
    RSYNCD_SECRETS_LINES,
    SASL_PASSWD_FILE_LINES,
    SCHEME_HASH_LINE,
    CRYPT_HASH,
)

# --- rules keyed by a field name -------------------------------------------------

STEMS = (
    "pass", "pw", "secret", "token", "key", "auth", "cred", "cookie", "jwt", "sessid", "sessionid", "pkcs12",
    "psk",
)  # fmt: skip
_NAME_RUN = re.compile(r"[\w.-]{0,80}")
_HEADER_NAMES = ("authorization", "proxy-authorization", "cookie", "set-cookie")

_HEADER = re.compile(
    r"(?<![\w-])(?P<name>(?i:(?:proxy-)?authorization|(?:set-)?cookie))"
    r"(?>[\"']?[ \t]*:[ \t]*[\"']?(?:"
    + SCHEME
    + ")?)"
    + FRESH
    + r"(?P<value>[^\s\x00\"'](?:[^\r\n\x00\"']*[^\s\x00\"'])?)"
)
# A password hash behind its {SCHEME} (slapd's olcRootPW, an LDIF's userPassword): to its end,
# commas too ({ARGON2}$argon2id$v=19$m=65536,t=2,p=1$SALT$HASH), and on the lines ldapsearch
# folds it onto at 76 columns (each starts with one blank; a YAML sibling holds a ": "). Maybe
# after a prefix of its own: ppolicy's pwdHistory is TIME#SYNTAX#LENGTH#{SCHEME}HASH.
_HASHED = (
    r"(?:[^\s\x00\"'<>{]{1,128}+)?\{[A-Za-z0-9._-]{1,32}+\}[^\s\x00\"'<>]{1,4096}+"
    r"(?:\r?\n [^\s\x00\"'<>]{1,4096}+(?=\r?\n|\x00|\Z)){0,64}+"
)
# A name may start with a digit (nmcli's "802-1x.password:"), or right after a percent-encoded byte.
_ASSIGN = re.compile(
    NAME_START + r"(?P<name>-{0,2}\w[\w.-]{0,80}+)(?P<sep>\\?[\"']?[ \t]*(?::=|=>|=|:(?![/:]))[ \t]*)"
    r"(?!(?:\\?[\"'])?(?:" + SCHEME + r")?\[REDACTED\])(?![|>][-+]?[ \t]*(?:\r?\n|\x00|$))(?!-----BEGIN)"
    r"(?P<value>" + QUOTED + "|" + _HASHED + "|(?:" + SCHEME + ")?" + BARE + ")"
)
_FLAG = re.compile(
    r"(?<![\w.-])(?P<name>--[A-Za-z][\w-]{0,80}+|-[A-Za-z][A-Za-z0-9_]{0,80}+)[ \t]+" + FRESH
    + r"(?P<value>" + QUOTED + r"|[^\s\x00\"'<>|-][^\s\x00\"']{0,4095})"
)  # fmt: skip
_XML = re.compile(
    r"<(?P<name>[A-Za-z_][\w:.-]{0,80}+)>" + FRESH + r"(?P<value>[^<\x00]{1,4096}+)"
    r"(?:</(?P=name)>|(?=<[^<>\x00]{0,80}+(?:\x00|\Z))|" + CUT + ")"  # or cut before (or in) its end tag
)


def lowercase(text: str) -> str:
    """``text`` lowercased, index for index (a few characters grow when lowercased)."""
    lower = text.lower()
    if len(lower) != len(text):
        lower = "".join(char.lower()[:1] for char in text)
    return lower


def _named_match(text: str, lower: str, start: int) -> re.Match[str] | None:
    """The header, assignment, flag, XML element, YAML block, LDIF base64 value, encoded or
    bracketed assignment whose name starts at ``start``, if any."""
    if start > 0 and text[start - 1] == "<":
        element = _XML.match(text, start - 1)
        if element is not None:
            return element
    if lower.startswith(_HEADER_NAMES, start):
        header = _HEADER.match(text, start)
        if header is not None:
            return header
    match = ANNOTATED_ASSIGN.match(text, start)
    if match is None:
        match = _ASSIGN.match(text, start)
    if match is None and text.startswith("-", start):
        match = _FLAG.match(text, start)
    if match is None:
        match = YAML_BLOCK.match(text, start)
    if match is None:
        match = LDIF_BASE64.match(text, start)
    if match is None:
        match = ENCODED_ASSIGN.match(text, start)
    if match is None and start > 1 and text[start - 1] in "['\"":
        match = bracketed_match(text, start)
    return match


# Flags named like secrets that take no value: "add_user --pre-hashed-password bob HASH" (rabbitmqctl).
SWITCHES = frozenset({"pre-hashed-password"})


def _named_value_is_secret(match: re.Match[str]) -> bool:
    value = match["value"].strip("\\\"'")
    if not value or set(value) == {"*"} or value.strip() == REDACTED:  # <secret>\n[REDACTED]\n</secret>
        return False
    name = match["name"].lstrip("-")
    if match.re is _FLAG and name.lower() in SWITCHES:
        return False
    return not says_no_secret(match, name, value) and is_secret_name(name)


def _stem_hits(lower: str) -> list[int]:
    """Where a stem occurs in ``lower``, in order (``str.find`` is much faster than a regex here)."""
    hits = []
    for stem in may_hold(lower, STEMS):  # a stem one of whose letters ``lower`` lacks is not in it
        hit = lower.find(stem)
        while hit != -1:
            hits.append(hit)
            hit = lower.find(stem, hit + len(stem))
    return sorted(hits)


def _named_matches(text: str, lower: str) -> Iterator[re.Match[str]]:
    """Every name-keyed secret in ``text`` (``lower`` is `lowercase` of it), in order, without overlaps.

    Candidates are the names holding a stem; a name's start is found by
    matching backwards on the reversed string, and only a secret name is
    matched against the header, assignment, flag and XML patterns.
    """
    hits = _stem_hits(lower)
    reverse = lower[::-1] if hits else ""
    done = 0  # where the last name (or redacted match) ended
    for hit in hits:
        if hit < done:
            continue
        back = _NAME_RUN.match(reverse, len(lower) - hit)
        forward = _NAME_RUN.match(lower, hit)
        assert back is not None  # runs may be empty, never missing
        assert forward is not None
        start = hit - (back.end() - back.start())
        done = forward.end()
        if not is_secret_name(text[start:done].lstrip("-")):
            start = after_percent_byte(text, start)
            if not is_secret_name(text[start:done]):
                continue
        match = _named_match(text, lower, start)
        if match is not None and _named_value_is_secret(match):
            done = match.end()
            yield match


# Groups that frame a value (template: a debconf record's, checked with its name; quote: the
# encoded quote before an encoded JSON value).
_NOT_VALUES = frozenset({"name", "sep", "indent", "tag", "template", "quote"})


def _value_span(match: re.Match[str]) -> tuple[int, int]:
    """The span of the value group that matched (any named group but those in `_NOT_VALUES`);
    the whole match when there is none."""
    for name, index in match.re.groupindex.items():
        if name not in _NOT_VALUES and match.start(index) != -1:
            return match.span(index)
    return match.span()


def _redacted(match: re.Match[str], spans: list[tuple[int, int]]) -> str:
    """The match with each of ``spans`` replaced; a quoted value keeps its quotes, a scheme stays."""
    text, pieces, done = match.string, [], match.start()
    for start, end in spans:
        value = text[start:end]
        quote = next((q for q in ('\\"', '"', "'") if len(value) >= 2 * len(q) and value.startswith(q)), "")
        scheme = _SCHEME_PREFIX.match(value, len(quote))
        pieces += [text[done:start], quote, scheme[0] if scheme else "", REDACTED, quote]
        done = end
    pieces.append(text[done : match.end()])
    return "".join(pieces)


_SCHEME_PREFIX = re.compile(SCHEME)


def _replace(
    text: str,
    matches: Iterator[re.Match[str]],
    inner: re.Pattern[str] | None = None,
    starts: list[int] | None = None,
) -> tuple[str, int]:
    """``text`` with the value of each match redacted, and how many there were; with ``inner``,
    each value of ``inner`` inside a match's value instead (``ACL SETUSER bob >PW1 >PW2``).
    With ``starts``, where each match starts in the text returned is appended to it."""
    pieces: list[str] = []
    done = count = shift = 0
    for match in matches:
        span = _value_span(match)
        spans = [span] if inner is None else [_value_span(found) for found in inner.finditer(text, *span)]
        redacted = _redacted(match, spans)
        if starts is not None:
            starts.append(match.start() + shift)
            shift += len(redacted) - (match.end() - match.start())
        pieces += [text[done : match.start()], redacted]
        done, count = match.end(), count + len(spans)
    if not count:
        return text, 0
    pieces.append(text[done:])
    return "".join(pieces), count


def scrub_text(text: str) -> tuple[str, int]:
    """``text`` with every built-in secret shape replaced by ``[REDACTED]``, and how many there were.

    Key blocks go first (so ``private_key: -----BEGIN ...`` is one block, not a
    one-word value), then the name-keyed rules, then the other shapes; a rule that
    finds one of a program's values per match (`ShapeRule.again`) runs again on the lines
    where it found one until it finds no more.
    """
    lower = lowercase(text)  # redactions only remove text, so gates may test the original
    text, total = _replace(text, SHAPE_RULES[0].matches(text, lower))
    text, count = _replace(text, _named_matches(text, lowercase(text) if total else lower))
    total += count
    for rule in SHAPE_RULES[1:]:
        starts: list[int] | None = [] if rule.again else None
        text, count = _replace(text, rule.matches(text, lower), rule.inner, starts)
        total += count
        if starts:
            text, count = _again(rule, text, starts)
            total += count
    return text, total


def _again(rule: ShapeRule, text: str, starts: list[int]) -> tuple[str, int]:
    """``text`` with the further values ``rule`` finds on the lines where it found one (at
    ``starts``), pass after pass until there are no more (`ShapeRule.again`), and how many."""
    total = 0
    for _ in range(AGAIN_PASSES - 1):
        found: list[int] = []
        text, count = _replace(text, rule.matches_on_lines(text, starts), rule.inner, found)
        total, starts = total + count, found
        if not count:
            break
    return text, total


def compile_operator_pattern(index: int, pattern: str) -> re.Pattern[str]:
    """Compile the operator's scrub pattern number ``index``; `ValueError` naming it when unusable."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(
            f"scrub pattern {index} {pattern!r} is not a valid regular expression: {exc}"
        ) from None
    if compiled.fullmatch("") is not None:
        raise ValueError(f"scrub pattern {index} {pattern!r} matches the empty string")
    return compiled

"""The scrubber's text rules: which substrings of a string are secrets.

How it works, and why it is fast: a rule runs on a string only when a cheap
substring test (its *gate*) passes, and each rule's pattern starts with a
literal or a rare character (``-----BEGIN``, ``://``, ``eyJ``, the ``_`` of
``ghp_``, the ``[?&;]`` before ``sig=``), so the regex engine skips from one
candidate to the next without trying every position. The rules keyed by a
field name (``password=x``, ``"apiKey": "x"``, ``--token x``,
``<secret>x</secret>``, ``Authorization: ...``) start from the places where a
secret-word stem (``pass``, ``token``, ``key`` ...) occurs in the lowercased
string and match anchored at the start of that word; `is_secret_name` then
decides whether the name is secret.

Rules run one after the other, each over the output of the one before, and
never match a value that is already ``[REDACTED]``, so a secret is counted
once and scrubbing twice changes nothing more. No rule matches across a NUL
(`SEPARATOR`), so the scrubber joins every string of a result with NULs and
scans them in one go: the per-string cost of ~15 rules is paid once. A redaction replaces only the
secret: ``postgres://app:[REDACTED]@db``, ``password="[REDACTED]"``,
``Bearer [REDACTED]``, ``ghp_[REDACTED]``; a private key block is replaced whole.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sonde.agent.secret_names import is_secret_name

REDACTED = "[REDACTED]"
SEPARATOR = "\x00"  # no rule matches across a NUL: strings joined with it are scrubbed as one text

_FRESH = r"(?!(?:\\?[\"'])?\[REDACTED\])"  # the value (maybe quoted) is not already redacted
_SCHEME = r"(?i:bearer|basic|token|digest|negotiate|bot)[ \t]+"  # an auth scheme before a credential
_QUOTED = (
    r'\\"(?:[^"\\\r\n\x00]|\\[^"\x00]){0,4096}\\"'
    + r'|"(?:[^"\\\r\n\x00]|\\[^\x00]){0,4096}"'
    + r"|'[^'\r\n\x00]{0,4096}'"
)
_BARE = r"[^\s\x00\"'`,;&<>(){}\[\]]{1,4096}"
_TOKEN_END = r"(?![A-Za-z0-9])"

# --- rules keyed by a field name -------------------------------------------------

STEMS = ("pass", "pw", "secret", "token", "key", "auth", "cred", "cookie", "jwt")
_NAME_RUN = re.compile(r"[\w.-]{0,80}")
_HEADER_NAMES = ("authorization", "proxy-authorization", "cookie", "set-cookie")

_HEADER = re.compile(
    r"(?<![\w-])(?P<name>(?i:(?:proxy-)?authorization|(?:set-)?cookie))"
    r"(?>[\"']?[ \t]*:[ \t]*[\"']?(?:"
    + _SCHEME
    + ")?)"
    + _FRESH
    + r"(?P<value>[^\s\x00\"'](?:[^\r\n\x00\"']*[^\s\x00\"'])?)"
)
_ASSIGN = re.compile(
    r"(?<![\w.-])(?P<name>-{0,2}[A-Za-z_][\w.-]{0,80}+)(?P<sep>\\?[\"']?[ \t]*(?::=|=>|=|:(?![/:]))[ \t]*)"
    r"(?!(?:\\?[\"'])?(?:" + _SCHEME + r")?\[REDACTED\])(?![|>][-+]?[ \t]*(?:\r?\n|\x00|$))(?!-----BEGIN)"
    r"(?P<value>" + _QUOTED + "|(?:" + _SCHEME + ")?" + _BARE + ")"
)
_FLAG = re.compile(
    r"(?<![\w.-])(?P<name>--[A-Za-z][\w-]{0,80}+|-[A-Za-z][A-Za-z0-9_]{0,80}+)[ \t]+" + _FRESH
    + r"(?P<value>" + _QUOTED + r"|[^\s\x00\"'<>|-][^\s\x00\"']{0,4095})"
)  # fmt: skip
_XML = re.compile(
    r"<(?P<name>[A-Za-z_][\w:.-]{0,80}+)>" + _FRESH + r"(?P<value>[^<\x00]{1,4096})</(?P=name)>"
)


def lowercase(text: str) -> str:
    """``text`` lowercased, index for index (a few characters grow when lowercased)."""
    lower = text.lower()
    if len(lower) != len(text):
        lower = "".join(char.lower()[:1] for char in text)
    return lower


def _named_match(text: str, lower: str, start: int) -> re.Match[str] | None:
    """The header, assignment, flag or XML element whose name starts at ``start``, if any."""
    if start > 0 and text[start - 1] == "<":
        element = _XML.match(text, start - 1)
        if element is not None:
            return element
    if lower.startswith(_HEADER_NAMES, start):
        header = _HEADER.match(text, start)
        if header is not None:
            return header
    match = _ASSIGN.match(text, start)
    if match is None and text.startswith("-", start):
        match = _FLAG.match(text, start)
    return match


# nsswitch.conf's "passwd: files systemd" names where accounts come from, not a password.
NSS_SOURCES = frozenset(
    {
        "files", "compat", "db", "nis", "nisplus", "ldap", "sss", "systemd", "winbind", "hesiod",
        "extrausers", "altfiles", "usrfiles", "cache", "mymachines", "[notfound=return]",
    }
)  # fmt: skip


def _named_value_is_secret(match: re.Match[str]) -> bool:
    value = match["value"].strip("\\\"'")
    if not value or set(value) == {"*"}:
        return False
    name = match["name"].lstrip("-")
    if name.lower() == "passwd" and value.lower() in NSS_SOURCES:
        return False
    return is_secret_name(name)


def _stem_hits(lower: str) -> list[int]:
    """Where a stem occurs in ``lower``, in order (``str.find`` is much faster than a regex here)."""
    hits = []
    for stem in STEMS:
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
            continue
        match = _named_match(text, lower, start)
        if match is not None and _named_value_is_secret(match):
            done = match.end()
            yield match


# --- rules keyed by a shape ----------------------------------------------------------


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
    match when there is none); ``check`` may reject a match; ``gate`` must pass first."""

    name: str
    pattern: re.Pattern[str]
    gate: Callable[[str, str], bool]
    check: Callable[[re.Match[str]], bool] | None = None

    def matches(self, text: str, lower: str) -> Iterator[re.Match[str]]:
        """The secrets in ``text``; ``lower`` (for the gate) is ``text`` or its input lowercased."""
        if not self.gate(text, lower):
            return
        for match in self.pattern.finditer(text):
            if self.check is None or self.check(match):
                yield match


def _contains(*needles: str) -> Callable[[str, str], bool]:
    return lambda text, lower: any(needle in text for needle in needles)


def _contains_folded(*needles: str) -> Callable[[str, str], bool]:
    return lambda text, lower: any(needle in lower for needle in needles)


def _long_with(char: str, min_chars: int = 15) -> Callable[[str, str], bool]:
    return lambda text, lower: len(text) >= min_chars and char in text


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
            + _FRESH
            + r"(?P<value>[A-Za-z0-9+/=]+(?:\r?\n[A-Za-z0-9+/=]+)*)(?=\r?\n|\x00|\Z)"
        ),
        _contains("Private-Lines"),
    ),
    # scheme://user:PASSWORD@host for any scheme (postgres, mongodb+srv, redis, amqp, https ...).
    ShapeRule(
        "url_password",
        re.compile(r"://[^\s\x00:/?#@\"'<>]*:(?!\[REDACTED\]@)(?P<value>[^\s\x00/?#\"'<>]+)@"),
        _contains("://"),
    ),
    # Go MySQL DSNs: user:PASSWORD@tcp(host:3306)/db
    ShapeRule(
        "go_dsn_password",
        re.compile(r":" + _FRESH + r"(?P<value>[^\s\x00/:]{1,256})@(?:tcp|unix)\("),
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
            + _TOKEN_END
            + r"|Iza(?P<google>[0-9A-Za-z_-]{35}))"
        ),
        _long_with("A", 20),
    ),
    # Tokens whose prefix ends with "_": GitHub, Stripe, npm, Hugging Face, Docker, DigitalOcean, Shopify.
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
        re.compile(r"hooks\.slack\.com/services/" + _FRESH + r"(?P<value>[A-Za-z0-9/]+)"),
        _contains("hooks.slack.com/services/"),
    ),
    # Signed-URL query parameters: Azure SAS sig=, S3/GCS presigned signatures, credentials and tokens.
    ShapeRule(
        "signed_url_query",
        re.compile(
            r"[?&;](?i:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token"
            r"|x-amz-credential|x-goog-credential)=" + _FRESH + r"(?P<value>[^&\s\x00\"'#<>]+)"
        ),
        _contains_folded("sig=", "signature=", "x-amz-", "x-goog-"),
    ),
    # "Bearer <token>"; the token must hold a digit so "Bearer authentication" survives.
    ShapeRule(
        "bearer",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:earer)[ \t]+"
            + _FRESH
            + r"(?P<value>(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*)"
        ),
        _contains_folded("bearer"),
    ),
    # "Basic <base64 of user:password>", checked by decoding.
    ShapeRule(
        "basic",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:asic)[ \t]+" + _FRESH + r"(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"
        ),
        _contains_folded("basic"),
        _basic_credentials,
    ),
    # Config directives without a separator, at the start of a line: redis.conf's requirepass, masterauth.
    ShapeRule(
        "config_directive",
        re.compile(
            r"(?<![^\n\x00])[ \t]*(?i:requirepass|masterauth)[ \t]+"
            + _FRESH
            + r"(?P<value>"
            + _QUOTED
            + r"|[^\s\x00\"']+)"
        ),
        _contains_folded("requirepass", "masterauth"),
    ),
    # ~/.netrc: machine HOST login USER password SECRET
    ShapeRule(
        "netrc_password",
        re.compile(
            r"(?i:login)[ \t]+[^\s\x00]+[ \t]+(?i:password)[ \t]+" + _FRESH + r"(?P<value>[^\s\x00]+)"
        ),
        _contains_folded("login"),
    ),
    # The password flags of known programs on a command line (within 200 characters of the
    # program's name): redis-cli -a, sshpass -p, the mongo tools' -p, the ldap tools' -w,
    # and curl's -u/--user/-U/--proxy-user user:SECRET. The argv form: sonde.agent.scrubber.
    ShapeRule(
        "program_password_flag",
        re.compile(
            r"(?<![\w.-])(?:"
            r"redis-cli(?:[^\r\n\x00]{0,200}?[ \t]-a[ \t]+)"
            r"|sshpass(?:[^\r\n\x00]{0,200}?[ \t]-p[ \t]*)"
            r"|mongo(?:sh|dump|restore|export|import|stat|top)?(?:[^\r\n\x00]{0,200}?[ \t]-p[ \t]+)"
            r"|ldap[a-z]{3,8}(?:[^\r\n\x00]{0,200}?[ \t]-w[ \t]*)"
            r"|curl(?:[^\r\n\x00]{0,200}?[ \t](?:-[uU][ \t]*|--(?:proxy-)?user(?:[ \t]+|=))"
            r"[\"']?[^\s\x00:\"']{1,256}:)"
            r")" + _FRESH + r"(?P<value>" + _QUOTED + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095})"
        ),
        _contains("redis-cli", "sshpass", "mongo", "ldap", "curl"),
    ),
    # mysql -pSECRET on a command line (within 200 characters, before any other mysql).
    ShapeRule(
        "mysql_p",
        re.compile(
            r"(?:mysql(?<![\w-]mysql)|mariadb(?<![\w-]mariadb))[\w-]*+"
            r"(?:[^\r\n\x00m]|m(?!ysql|ariadb)){0,200}?[ \t]-p" + _FRESH + r"(?P<value>[^\s\x00\"']+)"
        ),
        _contains("mysql", "mariadb"),
    ),
)


def _value_span(match: re.Match[str]) -> tuple[int, int]:
    """The span of the value group that matched (any named group but ``name`` and ``sep``);
    the whole match when there is none."""
    for name, index in match.re.groupindex.items():
        if name not in ("name", "sep") and match.start(index) != -1:
            return match.span(index)
    return match.span()


def _redacted(match: re.Match[str], start: int, end: int) -> str:
    """The match with ``[start, end)`` replaced; a quoted value keeps its quotes, a scheme stays."""
    value = match.string[start:end]
    quote = next((q for q in ('\\"', '"', "'") if len(value) >= 2 * len(q) and value.startswith(q)), "")
    scheme = _SCHEME_PREFIX.match(value, len(quote))
    kept = quote + (scheme[0] if scheme else "")
    return match.string[match.start() : start] + kept + REDACTED + quote + match.string[end : match.end()]


_SCHEME_PREFIX = re.compile(_SCHEME)


def _replace(text: str, matches: Iterator[re.Match[str]]) -> tuple[str, int]:
    pieces: list[str] = []
    done = 0
    for match in matches:
        start, end = _value_span(match)
        pieces += [text[done : match.start()], _redacted(match, start, end)]
        done = match.end()
    if not pieces:
        return text, 0
    pieces.append(text[done:])
    return "".join(pieces), len(pieces) // 2


def scrub_text(text: str) -> tuple[str, int]:
    """``text`` with every built-in secret shape replaced by ``[REDACTED]``, and how many there were.

    Key blocks go first (so ``private_key: -----BEGIN ...`` is one block, not a
    one-word value), then the name-keyed rules, then the other shapes.
    """
    lower = lowercase(text)  # redactions only remove text, so gates may test the original
    text, total = _replace(text, SHAPE_RULES[0].matches(text, lower))
    text, count = _replace(text, _named_matches(text, lowercase(text) if total else lower))
    total += count
    for rule in SHAPE_RULES[1:]:
        text, count = _replace(text, rule.matches(text, lower))
        total += count
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

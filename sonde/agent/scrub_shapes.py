"""The scrubber's secrets recognised by their shape: the rule type, the fragments rules are
written with, and the rules for credentials with a shape of their own.

Each `ShapeRule` is a pattern for one kind of secret (a private key block, a
vendor token, a URL password, a program's password flag ...) behind a cheap
gate (`sonde.agent.scrub_gates`); `sonde.agent.scrub_rules` runs them, with the rules keyed by a field
name, in `scrub_text`, in the order of its `SHAPE_RULES`. Only a rule's value
group is redacted (the whole match when it has none), or, for a rule with an
``inner`` pattern, each of its values inside that group (every ``>PW`` after
``ACL SETUSER``, every logon on an ``rman`` line). Every pattern starts with a
literal or a rare character so the regex engine skips from one candidate to the
next, and every repetition is bounded: hostile text scrubs in linear time.

The rules here: key blocks, URL passwords (percent-encoded too), cloud and vendor tokens,
secret URLs (Slack's and Discord's webhooks, Telegram's bot tokens), HTTP auth schemes
(`KEY_AND_TOKEN_RULES`), and passwords in SQL and Redis statements. Configuration files'
rules are in `sonde.agent.scrub_config_files`, credential files' and password hashes' in
`sonde.agent.scrub_credential_files`, programs' command lines' in
`sonde.agent.scrub_programs` (written in the grammar of `sonde.agent.scrub_commands`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sonde.agent.scrub_gates import contains, contains_folded, long_with

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
# A bare value: a word to a blank, a quote or a separator (",;&<>"). A bracket group balanced
# inside it is part of it (Pa(ss)word1, ab[1]cd, x{y}z), an unbalanced closer ends it
# (f(password=x), {password: x}), and an opener never closed before the word's end takes the
# rest of the word (abc(def: the opener is part of the secret). It starts with no bracket: a
# list's or a map's "[...]", "{...}" and a template's "{password}" are no value.
_BARE_CHAR = r"[^\s\x00\"'`,;&<>(){}\[\]]"
_GROUPED = r"[^\s\x00\"'`&<>(){}\[\]]{0,256}+"  # a group's text: "," and ";" too
BARE = (
    _BARE_CHAR
    + r"(?:"
    + _BARE_CHAR
    + r"|\("
    + _GROUPED
    + r"\)|\["
    + _GROUPED
    + r"\]|\{"
    + _GROUPED
    + r"\}|[(\[{](?![\"'`])[^\s\x00\"'`,;&<>]{0,4096}+){0,4095}+"
)
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


# What a key block's BEGIN and END lines name: a private key, or an OpenVPN key.
_KEY_KIND = r"(?:[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?| OpenVPN [A-Za-z0-9 -]{1,40}?)"
_PCT = r"%(?:25)?"  # a percent-encoded byte's "%", maybe encoded again ("%253A")


def _telegram_bot_id_before(match: re.Match[str]) -> bool:
    """True when a bot's numeric id (maybe after "bot", as in its API URLs) is right before the match."""
    return _TELEGRAM_BOT_ID.search(match.string, max(0, match.start() - 20), match.start()) is not None


_TELEGRAM_BOT_ID = re.compile(r"(?:(?<![\w-])bot|(?<![\w:.-]))\d{5,16}+\Z")

# Credentials by their own shape, in the order they run (the private key block first: see
# `sonde.agent.scrub_rules.scrub_text`).
KEY_AND_TOKEN_RULES = (
    # PEM / OpenSSH / PGP private key blocks, RFC 4716's (SSH.com's "---- BEGIN SSH2 ENCRYPTED
    # PRIVATE KEY ----") and OpenVPN's shared keys (tls-auth's "Static key V1", tls-crypt-v2's
    # client and server keys), to the END line or, when cut short, to the end; and a static key's
    # hex lines before its END line at a text's start (a tail of ta.key without its BEGIN line).
    ShapeRule(
        "private_key_block",
        re.compile(
            r"-(?:----BEGIN" + _KEY_KIND + r"-----|--- BEGIN" + _KEY_KIND + r" ----)"
            r"[^\x00]*?(?:-(?:----END" + _KEY_KIND + r"-----|--- END" + _KEY_KIND + r" ----)|(?=\x00)|\Z)"
            r"|(?<![^\x00])(?:[0-9a-f]{32}\r?\n){1,16}+-----END OpenVPN Static key V1-----"
        ),
        contains("PRIVATE KEY", "OpenVPN"),
    ),
    # The private half of a PuTTY .ppk file.
    ShapeRule(
        "putty_private_lines",
        re.compile(
            r"Private-Lines:[ \t]*\d+[ \t]*\r?\n"
            + FRESH
            + r"(?P<value>[A-Za-z0-9+/=]+(?:\r?\n[A-Za-z0-9+/=]+)*)(?=\r?\n|\x00|\Z)"
        ),
        contains("Private-Lines"),
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
        contains("://"),
    ),
    # Go MySQL DSNs: user:PASSWORD@tcp(host:3306)/db
    ShapeRule(
        "go_dsn_password",
        re.compile(r":" + FRESH + r"(?P<value>[^\s\x00/:]{1,256})@(?:tcp|unix)\("),
        contains("@tcp(", "@unix("),
    ),
    # The same percent-encoded in a URL's parameter (an access log's ?next=https%3A%2F%2Fu%3APW%40h,
    # once or twice): the password between an encoded ":" and "@".
    ShapeRule(
        "encoded_url_password",
        re.compile(
            _PCT + r"3[Aa]" + _PCT + r"2[Ff]" + _PCT + r"2[Ff]"
            r"(?:[^\s\x00%/?#@:\"'<>&]|%(?!(?:25)?(?:3[Aa]|40|2[Ff]))[0-9A-Fa-f]{2}){1,256}+"
            + _PCT
            + r"3[Aa]"
            + FRESH
            + r"(?P<value>(?:[^\s\x00%/?#@\"'<>&]|%(?!(?:25)?(?:40|2[Ff]|3[Ff]|23|26))[0-9A-Fa-f]{2}){1,1024}+)"
            + _PCT
            + r"40"
        ),
        contains_folded("%3a%2f%2f", "%253a%252f%252f"),
    ),
    # JSON Web Tokens, whole.
    ShapeRule(
        "jwt",
        re.compile(r"eyJ(?<![\w-]eyJ)[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
        contains("eyJ"),
    ),
    # AWS access key ids (AKIA..., ASIA...) and Google API keys (AIza...): the prefix stays.
    ShapeRule(
        "aws_google_key",
        re.compile(
            r"A(?<![A-Za-z0-9]A)(?:(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA)(?P<value>[A-Z0-9]{16})"
            + TOKEN_END
            + r"|Iza(?P<google>[0-9A-Za-z_-]{35}))"
        ),
        long_with("A", 20),
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
        long_with("_"),
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
            # age's secret keys: AGE-SECRET-KEY-1 and the key in bech32 (the prefix stays)
            r"|(?<=AGE-SECRET-KEY-)(?<![\w-]AGE-SECRET-KEY-)1(?P<v5>[02-9AC-HJ-NP-Z]{50,100})"
            r")"
        ),
        long_with("-"),
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
        long_with("."),
    ),
    # Slack incoming webhooks: the path is the credential.
    ShapeRule(
        "slack_webhook",
        re.compile(r"hooks\.slack\.com/services/" + FRESH + r"(?P<value>[A-Za-z0-9/]+)"),
        contains("hooks.slack.com/services/"),
    ),
    # Discord webhooks: the token after the webhook's id is the credential.
    ShapeRule(
        "discord_webhook",
        re.compile(
            r"discord(?:app)?\.com/api/(?:v\d{1,2}/)?webhooks/\d{5,30}+/"
            + FRESH
            + r"(?P<value>[\w-]{20,256}+)"
        ),
        contains("discord"),
    ),
    # Telegram bot tokens (ID:AA...: the part after the colon), alone or in the bot API's URLs
    # (https://api.telegram.org/botID:AA.../sendMessage); the bot's id stays.
    ShapeRule(
        "telegram_bot_token",
        re.compile(r":(?P<value>AA[A-Za-z0-9_-]{30,40}+)(?![A-Za-z0-9_-])"),
        contains(":AA"),
        _telegram_bot_id_before,
    ),
    # Signed-URL query parameters: Azure SAS sig=, S3/GCS presigned signatures, credentials and tokens.
    ShapeRule(
        "signed_url_query",
        re.compile(
            r"[?&;](?i:sig|signature|x-amz-signature|x-goog-signature|x-amz-security-token"
            r"|x-amz-credential|x-goog-credential)=" + FRESH + r"(?P<value>[^&\s\x00\"'#<>]+)"
        ),
        contains_folded("sig=", "signature=", "x-amz-", "x-goog-"),
    ),
    # "Bearer <token>"; the token must hold a digit so "Bearer authentication" survives.
    ShapeRule(
        "bearer",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:earer)[ \t]+"
            + FRESH
            + r"(?P<value>(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{8,}=*)"
        ),
        contains_folded("bearer"),
    ),
    # "Basic <base64 of user:password>", checked by decoding.
    ShapeRule(
        "basic",
        re.compile(
            r"[Bb](?<![\w-][Bb])(?i:asic)[ \t]+" + FRESH + r"(?P<value>[A-Za-z0-9+/]{6,}={0,2})(?![\w+/=])"
        ),
        contains_folded("basic"),
        _basic_credentials,
    ),
)

# Passwords in SQL statements (pg_stat_activity, the MySQL process list, logs): PostgreSQL's
# [ENCRYPTED] PASSWORD '...', MySQL's IDENTIFIED [WITH plugin] BY|AS '...', PASSWORD('...'),
# SET PASSWORD FOR user = '...'.
SQL_PASSWORD = ShapeRule(
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
    contains_folded("password", "identified"),
)

# Redis commands as the slow log shows them: AUTH [user] PASSWORD, HELLO 3 AUTH user PASSWORD,
# CONFIG SET requirepass|masterauth PASSWORD (the whole line).
REDIS_COMMAND_PASSWORD = ShapeRule(
    "redis_command_password",
    re.compile(
        r"(?<![^\n\x00])[ \t]*(?:AUTH(?:[ \t]+[^\s\x00]{1,256}+)?|(?i:hello)[ \t]+\d[ \t]+(?i:auth)[ \t]+[^\s\x00]{1,256}+"
        r"|(?i:config[ \t]+set[ \t]+(?:requirepass|masterauth)))[ \t]+"
        + FRESH
        + r"(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"']{1,4096}+)(?=[ \t]*(?:\r?\n|\x00|\Z))"
    ),
    contains_folded("auth", "config"),
)

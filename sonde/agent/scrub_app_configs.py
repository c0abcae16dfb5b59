"""The scrubber's rules for applications' configuration files that say a secret their own way.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others: PHP's ``define('DB_PASSWORD', 'X')`` (WordPress's wp-config.php,
its keys and salts too), a secret variable's default (``env('DB_PASSWORD', 'X')``), a Java web
application's ``<param-name>password</param-name> <param-value>X</param-value>`` (web.xml's
context and init params, env entries), fetchmail's
``poll HOST user U password X`` and strongSwan's and libreswan's ipsec.secrets (``: PSK "X"``,
``: RSA key.pem "X"``). Each reads a value, not prose: an empty value, a variable's reference
or a placeholder stays. Every repetition is bounded and most are possessive: hostile text
scrubs in linear time.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_config_files import PROSE_OR_STATE_WORD
from sonde.agent.scrub_gates import contains, contains_folded
from sonde.agent.scrub_shapes import CUT, FRESH, QUOTED, ShapeRule
from sonde.agent.secret_names import is_secret_name

# A PHP (or Python, Ruby) string's text, a backslash escaping the next character.
_SINGLE_QUOTED = r"(?:[^'\\\r\n\x00]|\\[^\r\n\x00]){1,4096}+"
_DOUBLE_QUOTED = r"(?:[^\"\\\r\n\x00]|\\[^\r\n\x00]){1,4096}+"
# WordPress's keys and salts (wp-config.php): "NONCE_KEY" and "AUTH_SALT" read as no secret name.
_WORDPRESS_KEYS = re.compile(r"(?:SECURE_AUTH|AUTH|LOGGED_IN|NONCE)_(?:KEY|SALT)")
_WORDPRESS_PLACEHOLDER = "put your unique phrase here"  # wp-config-sample.php's, for every key


def _defines_a_secret(match: re.Match[str]) -> bool:
    value = match["value"] if match["value"] is not None else match["v2"]
    if value == _WORDPRESS_PLACEHOLDER:
        return False
    return is_secret_name(match["name"]) or _WORDPRESS_KEYS.fullmatch(match["name"]) is not None


# PHP's define('NAME', 'VALUE') (in any case, maybe with a third argument) whose NAME says secret
# or is one of WordPress's keys and salts: the string's text. A double-quoted string starting with
# a variable ("$password") and a call (getenv('X')) are no value.
PHP_DEFINE = ShapeRule(
    "php_define",
    re.compile(
        r"(?<![\w$>:])(?i:define)[ \t]*\([ \t]*(?P<quote>[\"'])(?P<name>[A-Za-z_]\w{0,80}+)(?P=quote)[ \t]*,"
        r"[ \t]*"
        + FRESH
        + r"(?:'(?P<value>"
        + _SINGLE_QUOTED
        + r")(?:'|"
        + CUT
        + r")|\"(?!\$|\{\$)(?P<v2>"
        + _DOUBLE_QUOTED
        + r")(?:\"|"
        + CUT
        + r"))"
    ),
    contains_folded("define"),
    _defines_a_secret,
)

# A call reading an environment variable whose name says secret, with a default (the password
# when the variable is unset): WordPress's docker image's getenv_docker('WORDPRESS_DB_PASSWORD',
# 'X') in wp-config.php, Laravel's env('DB_PASSWORD', 'X'), Python's os.getenv|os.environ.get('X',
# 'X'), Ruby's ENV.fetch('X', 'X'). The call's name is no value (`scrub_assignments.is_code`).
ENV_DEFAULT = ShapeRule(
    "env_default",
    re.compile(
        r"(?<![\w$>:.])(?:env|getenv_docker|os\.getenv|os\.environ\.get|ENV\.fetch)[ \t]*\([ \t]*"
        r"(?P<quote>[\"'])(?P<name>[A-Za-z_]\w{0,80}+)(?P=quote)[ \t]*,[ \t]*"
        + FRESH
        + r"(?:'(?P<value>"
        + _SINGLE_QUOTED
        + r")'|\"(?P<v2>"
        + _DOUBLE_QUOTED
        + r")\")"
    ),
    contains("env(", "env_docker(", "environ.get(", "ENV.fetch("),
    lambda match: is_secret_name(match["name"]),
)

# A Java web application's parameters whose name says secret: web.xml's <context-param> and
# <init-param> (<param-name>NAME</param-name> then <param-value>X</param-value>, maybe on the next
# line) and <env-entry> (an <env-entry-type> between its name and value); a placeholder that a
# build or the container fills in ("${db.password}") stays.
WEB_XML_PARAM = ShapeRule(
    "web_xml_param",
    re.compile(
        r"<(?P<tag>param|env-entry)-name>[ \t\r\n]{0,64}+(?P<name>[^<\s\x00]{1,200}+)[ \t\r\n]{0,64}+"
        r"</(?P=tag)-name>(?:[ \t\r\n]{0,256}+<(?P=tag)-type>[^<\x00]{0,256}+</(?P=tag)-type>)?+"
        r"[ \t\r\n]{0,256}+<(?P=tag)-value>[ \t\r\n]{0,64}+"
        + FRESH
        + r"(?!\$\{)(?P<value>[^<\s\x00](?:[^<\x00]{0,4094}[^<\s\x00])?)"
    ),
    contains("-name>"),
    lambda match: is_secret_name(match["name"]),
)

# fetchmail's rc file: the password (keyword password or pass) of a poll entry, on the poll line
# after its server options ("auth password" is one), or on a line starting with "user NAME" after
# fetchmail's noise words (there, with, is NAME here ...); quoted or one word that is no prose
# ("user alice with password reset" in a log; "username and password entries" is prose). A line
# of its own starting with the keyword holds it quoted, or as a word before fetchmail's words.
_FETCHMAIL_WORD = r"(?:\"[^\"\r\n\x00]{0,256}+\"|'[^'\r\n\x00]{0,256}+'|[^\s\x00\"']{1,256}+)"
_FETCHMAIL_NOISE = r"(?:there|here|with|has|wants|and|options|is[ \t]++" + _FETCHMAIL_WORD + ")"
_FETCHMAIL_PASSWORD = r"pass(?:word)?[ \t]++(?:with[ \t]++)?"
# What follows a password on a line of its own: fetchmail's words, not prose ("password FetchPw is
# alice here options ssl").
_FETCHMAIL_AFTER = r"(?:is|there|here|options|with|and|user|username|ssl|keep|nokeep|fetchall|no)"
FETCHMAIL_PASSWORD = ShapeRule(
    "fetchmail_password",
    re.compile(
        r"(?:(?<![^\n\x00])[ \t]*+(?:poll|skip)[ \t]++[^\s\x00]{1,256}+(?:[ \t]++(?:auth(?:enticate)?[ \t]++"
        r"[^\s\x00]{1,256}+|(?!pass(?:word)?(?![^\s\x00]))[^\s\x00]{1,256}+)){0,24}+[ \t]++"
        r"|(?<![^\n\x00])[ \t]*+user(?:name)?[ \t]++(?!"
        + PROSE_OR_STATE_WORD
        + r")(?=[\w\"'@])"
        + _FETCHMAIL_WORD
        + r"(?:[ \t]++"
        + _FETCHMAIL_NOISE
        + r"){0,8}+[ \t]++)"
        + _FETCHMAIL_PASSWORD
        + FRESH
        + r"(?!"
        + PROSE_OR_STATE_WORD
        + r"|\"\"|'')(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"'][^\s\x00]{0,4095}+)"
        r"|(?<![^\n\x00])[ \t]*+"
        + _FETCHMAIL_PASSWORD
        + FRESH
        + r"(?:(?P<v2>\"(?:[^\"\\\r\n\x00]|\\[^\x00]){1,4096}+\"|'[^'\r\n\x00]{1,4096}+')|(?!"
        + PROSE_OR_STATE_WORD
        + r")(?P<v3>[^\s\x00\"'][^\s\x00]{0,4095}+)(?=[ \t]++"
        + _FETCHMAIL_AFTER
        + r"(?![^\s\x00])))"
    ),
    contains("pass"),
)

# strongSwan's and libreswan's ipsec.secrets: [SELECTORS] : TYPE [ARGS] SECRET at a line's start.
# A shared secret's (PSK, EAP, XAUTH, NTLM; XAUTH maybe after a user): quoted, 0x hex, 0s base64
# or a word; a private key's passphrase after its file (RSA, ECDSA, P12 ...; a smartcard's PIN
# after its slot). "%prompt" (ask at start) and "" are none.
_IPSEC_SELECTOR = r"(?!:(?![^\s\x00]))[^\s\x00#][^\s\x00]{0,255}+"
_IPSEC_WORD = r"(?:\"[^\"\r\n\x00]{1,4096}+\"|'[^'\r\n\x00]{1,4096}+'|[^\s\x00\"'#%][^\s\x00]{0,4095}+)"
_IPSEC_TYPES = (
    "PSK", "EAP", "XAUTH", "NTLM", "RSA", "ECDSA", "ED25519", "ED448", "BLISS", "PKCS8", "PKCS12", "P12",
    "PIN", "PPK",
)  # fmt: skip
IPSEC_SECRET = ShapeRule(
    "ipsec_secret",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:"
        + _IPSEC_SELECTOR
        + r"[ \t]++){0,16}+:[ \t]++(?:(?:PSK|EAP|XAUTH|NTLM)(?:[ \t]++"
        + _IPSEC_WORD
        + r"(?=[ \t]++[^\s\x00#]))?+|(?:RSA|ECDSA|ED25519|ED448|BLISS|PKCS8|PKCS12|P12|PIN|PPK)[ \t]++"
        r"[^\s\x00]{1,1024}+)[ \t]++" + FRESH + r"(?P<value>" + _IPSEC_WORD + r")"
    ),
    lambda text, lower: ":" in text and any(kind in text for kind in _IPSEC_TYPES),
)

"""The scrubber's rules for configuration files: the secrets a file's own syntax announces.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others. They read lines as the program that owns the file reads them,
anchored at a line's start (maybe indented, maybe commented out: a directive put aside still
holds a password): redis.conf's requirepass, nslcd's and slapd's bindpw/rootpw, a kickstart
file's rootpw; debconf's answers (preseed files, debconf-set-selections' input) and its
database records (passwords.dat); ~/.netrc and ~/.pgpass lines; XML key-value pairs (.NET's
appSettings, Spring's properties, Java's XML properties files); ifupdown's wpa-psk, msmtp's
password, snmpd's communities (its trap sinks' and snmptrapd's too) and users, haproxy's stats
auth and userlist passwords, Consul's and Nomad's gossip keys. A
``name: value`` or ``name=value`` line whose name says secret needs no rule here: the rules
keyed by a field name (`sonde.agent.scrub_rules`) hide it. Every repetition is bounded and
most are possessive: hostile text scrubs in linear time.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_commands import ECHOED
from sonde.agent.scrub_gates import contains, contains_folded
from sonde.agent.scrub_programs import SNMP_FLAG_VALUES
from sonde.agent.scrub_shapes import CUT, FRESH, QUOTED, ShapeRule
from sonde.agent.secret_names import is_secret_name, name_parts

_PGPASS_PORT = re.compile(r":(?:\d{1,5}|\*):[^\s:\x00]{1,63}:[^\s:\x00]{1,63}:")  # the gate of pgpass_line
# The flags before a kickstart file's rootpw password (--iscrypted, --plaintext, --allow-ssh).
_DIRECTIVE_FLAGS = r"(?:[ \t]+--[a-z][a-z-]{0,31}+(?![^\s\x00]))*+"
# What comments a directive out: "#", "##", "#  ", an ini file's ";" or "; ".
_COMMENTED = r"[#;][#; \t]{0,16}+"
# A word of prose after a directive's name commented out ("# requirepass is not set by
# default", "#masterauth and requirepass are ...") where its value would be: a verb, an article,
# a conjunction or a preposition, maybe with a comma or a stop after it.
_PROSE_WORDS = (
    "is", "isn't", "was", "are", "were", "be", "been", "has", "have", "had", "must", "should",
    "shall", "can", "cannot", "can't", "could", "will", "won't", "would", "may", "might", "does",
    "doesn't", "do", "did", "needs", "requires", "sets", "takes", "makes", "works", "applies",
    "allows", "enables", "disables", "defaults", "and", "or", "but", "nor", "not", "to", "in", "on",
    "of", "for", "with", "without", "by", "from", "at", "as", "if", "when", "the", "a", "an",
    "this", "that", "only", "also", "here", "below", "above", "option", "directive", "setting",
    "value",
)  # fmt: skip
_PROSE_THEN_WORDS = (
    r"(?i:"
    + "|".join(re.escape(word) for word in sorted(_PROSE_WORDS, key=len, reverse=True))
    + r")[,.;:]?[ \t]++[^\s\x00]"
)
# A debconf answer whose type is "password", before its value: OWNER QUESTION password (the owner
# a package name or d-i, the question PACKAGE/NAME: "the mysql-server/root_password password is
# ..." at a line's start reads as one all the same).
_PASSWORD_ANSWER = (
    r"[a-z0-9][a-z0-9.+-]{0,127}+[ \t]{1,64}+[\w.+-]{1,128}+/[\w./+-]{1,256}+[ \t]{1,64}+password[ \t]{1,64}+"
    + FRESH
)
# A quoted answer's value, to its closing quote: in double quotes a backslash escapes the next
# character; printf's "\n" right before the closing quote ends the line, not the value.
_DOUBLE_QUOTED_VALUE = r'(?:[^"\s\x00\\]|\\(?!n")[^\r\n\x00])(?:[^"\\\r\n\x00]|\\(?!n")[^\r\n\x00]){0,4095}+'
_SINGLE_QUOTED_VALUE = r"(?:[^'\s\x00\\]|\\(?!n'))(?:[^'\\\r\n\x00]|\\(?!n')){0,4095}+"

# Config directives without a separator, at the start of a line (maybe indented, maybe
# commented out: "#", "# ", "#  ", "##", an ini file's ";": a directive put aside still holds
# a password): redis.conf's requirepass, masterauth (one word, maybe quoted; commented out,
# not a word of prose with more words after it: "# requirepass is not set by default" is prose,
# "# requirepass PW old" a value and a note); nslcd.conf's bindpw
# and rootpwmodpw (in any case, as nslcd reads its keywords), nss-ldapd's rootbindpw, pam_ldap.conf's
# (libnss-ldap's) bindpw, slapd.conf's rootpw (a {SSHA} hash too: it can be cracked) and a
# kickstart file's rootpw [--iscrypted] PW: the rest of the line, as nslcd and pam_ldap read
# it ("rootpw --lock" gives none), so prose after such a word at a line's start, commented
# out or not, is hidden too.
CONFIG_DIRECTIVE = ShapeRule(
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
        + r"(?!"
        + _PROSE_THEN_WORDS
        + r")(?P<v3>"
        + QUOTED
        + r"|[^\s\x00\"']{1,4096}+)"
        + r"|(?:"
        + _COMMENTED
        + r")?(?i:bindpw|rootpw(?:modpw)?|rootbindpw)"
        + _DIRECTIVE_FLAGS
        + r"[ \t]+"
        + FRESH
        + r"(?P<v2>(?!--)[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?))"
    ),
    contains_folded("requirepass", "masterauth", "bindpw", "rootpw"),
)

# debconf answers of type "password" (whatever the question is called; not string, boolean,
# select ...): OWNER QUESTION password VALUE as debconf-get-selections prints them (TABs) and a
# preseed file, a here-document or debconf-set-selections reads them, at a line's start (maybe
# indented or commented out: example-preseed.txt's "#d-i passwd/root-password password r00tme"),
# the rest of the line (debconf reads it so); after echo, unquoted, one word (echo a b/c password
# PW | debconf-set-selections); in a quoted string at a word's start, to its closing quote: echo's
# or printf's (printf '%s\n' '...' | debconf-set-selections), a here-string's (<<< '...'), a
# variable's (ANSWER='...'), a script's (sh -c "echo '...' | ...").
DEBCONF_PASSWORD = ShapeRule(
    "debconf_password",
    re.compile(
        r"(?<![^\n\x00])[ \t]{0,64}+(?:#[#; \t]{0,16}+)?"
        + _PASSWORD_ANSWER
        + r"(?P<value>[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?)|"
        + ECHOED
        + _PASSWORD_ANSWER
        + r"(?P<v2>[^\s\x00\"'|;&<>]{1,4096}+)"
        + r"|(?<![^\s\x00=(<])(?:\""
        + _PASSWORD_ANSWER
        + r"(?P<v3>"
        + _DOUBLE_QUOTED_VALUE
        + r")|'"
        + _PASSWORD_ANSWER
        + r"(?P<v4>"
        + _SINGLE_QUOTED_VALUE
        + r"))"
    ),
    contains("password"),
)

# The words ending a question that asks for a password again (ejabberd/verify,
# nagios3/adminpassword-repeat), to check the first answer.
_CONFIRMATIONS = frozenset({"verify", "confirm", "confirmation", "again", "repeat", "retype", "reenter"})


def _asks_for_a_password(question: str, value: str) -> bool:
    """Whether a debconf question (PACKAGE/[PATH/]NAME) asks for a password: its NAME is a secret
    name, or a confirmation word after one (adminpassword-repeat) or alone (verify; but a
    boolean's "true" or "false" answers no password: apt-listchanges/confirm)."""
    name = question.rpartition("/")[2]
    if is_secret_name(name):
        return True
    parts = name_parts(name)
    if not parts or parts[-1] not in _CONFIRMATIONS:
        return False
    if len(parts) == 1:
        return value.strip().lower() not in ("true", "false")
    return is_secret_name("_".join(parts[:-1]))


# debconf's database (passwords.dat; config.dat alike): a record per question, "Name:" first,
# then "Template:", "Value:" (one line), "Owners:" ..., a blank line after it. Its value is
# hidden when the question (its own name, after "PACKAGE/", or its template's) asks for a
# password (`_asks_for_a_password`): passwords.dat does not say a record's type, and config.dat's
# passwd/user-fullname is no secret although "passwd/" names one.
DEBCONF_DB_VALUE = ShapeRule(
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
        _asks_for_a_password(question, match["value"])
        for question in (match["name"], match["template"])
        if question is not None
    ),
)

# A debconf database line (or a string of a probe's answer holding one): a record's field, an
# indented line of its Variables, or the blank line between records.
_DEBCONF_DB_LINE = (
    r"(?:(?:Name|Template|Value|Owners|Flags|Variables):[^\n\x00]{0,4096}+| [^\n\x00]{0,4096}+|)"
)
_DEBCONF_DB_LINES_MAX = 1 << 20  # records' lines after a "passwords.dat" (a probe reads 1 MiB at most)

# Every value of the records following a mention of debconf's passwords.dat, whatever their
# question is called: it holds answers of type password only. A probe's answer names the file it
# read before its content or lines (system.files.read, system.logs.head: "path" first), as does a
# "==> passwords.dat <==" header or a "cat .../passwords.dat" line: from there, the run of
# record lines (across the NULs between a result's strings too) is the file's; each "Value:" in
# it is hidden.
DEBCONF_PASSWORDS_DAT_VALUES = ShapeRule(
    "debconf_passwords_dat_values",
    re.compile(
        r"passwords\.dat[^\n\x00]{0,4096}+(?P<value>(?:[\n\x00]"
        + _DEBCONF_DB_LINE
        + r"){1,"
        + str(_DEBCONF_DB_LINES_MAX)
        + r"}+)"
    ),
    contains("passwords.dat"),
    inner=re.compile(r"(?<![^\n\x00])Value:[ \t]?" + FRESH + r"(?P<value>[^\s\x00][^\r\n\x00]{0,4095}+)"),
)

# ~/.netrc: machine HOST login USER password SECRET
NETRC_PASSWORD = ShapeRule(
    "netrc_password",
    re.compile(r"(?i:login)[ \t]+[^\s\x00]+[ \t]+(?i:password)[ \t]+" + FRESH + r"(?P<value>[^\s\x00]+)"),
    contains_folded("login"),
)

# A ~/.pgpass line: host:port:database:user:PASSWORD (port a number or *).
PGPASS_LINE = ShapeRule(
    "pgpass_line",
    re.compile(
        r"(?<![^\n\x00])(?!\d{1,2}:)[^\s:\x00#\\]{1,253}+:(?:\d{1,5}|\*):[^\s:\x00]{1,63}+:[^\s:\x00]{1,63}+:"
        + FRESH
        + r"(?P<value>(?:[^\r\n:\x00\\]|\\[^\r\n\x00]){1,4096}+)(?=\r?\n|\x00|\Z)"
    ),
    lambda text, lower: _PGPASS_PORT.search(text) is not None,
)

# XML key-value pairs whose key names a secret: .NET's appSettings (<add key="Password"
# value="X" />), Spring's and Hibernate's properties (<property name="password" value="X"/>, maybe
# with other attributes between; <property name="hibernate.connection.password">X</property>,
# <property name="password"><value>X</value></property>), Java's XML properties files (<entry
# key="db.password">X</entry>), <param name=... value=...>: the value attribute or the element's text.
_XML_ATTRIBUTE = r"[ \t\r\n]++[\w:.-]{1,64}+[ \t]*=[ \t]*(?:\"[^\"<>\x00]{0,256}+\"|'[^'<>\x00]{0,256}+')"
XML_KEY_VALUE = ShapeRule(
    "xml_key_value",
    re.compile(
        r"<(?P<tag>[A-Za-z][\w:.-]{0,64}+)[ \t\r\n]++(?i:key|name)[ \t]*=[ \t]*([\"'])(?P<name>[^\"'<>\x00]{1,200}+)\2"
        r"(?:(?:" + _XML_ATTRIBUTE + r"){0,4}?[ \t\r\n]++(?i:value)[ \t]*=[ \t]*([\"'])(?!\[REDACTED\])"
        r"(?P<value>[^\"'\x00]{1,4096}+)(?:\4|" + CUT + ")"
        r"|[^<>\x00]{0,256}+(?<!/)>[ \t\r\n]{0,256}+(?:<value>[ \t\r\n]{0,256}+)?(?!\[REDACTED\])"
        r"(?P<v2>[^<\s\x00][^<\x00]{0,4095}+)(?:</|" + CUT + "))"
    ),
    lambda text, lower: "<" in text and ("key" in lower or "name" in lower),
    lambda match: is_secret_name(match["name"]),
)

# ifupdown's Wi-Fi secrets in /etc/network/interfaces (wpa-psk PW, wpa-password, wpa-wep-key0 ...)
# at a line's start, maybe indented: the rest of the line, as ifupdown hands it to wpa_supplicant;
# commented out, one word that is no prose ("# wpa-psk is set below" stays).
_WPA_SECRET = r"wpa-(?:psk|password|passphrase|private-key-passwd2?|wep-key[0-3])"
IFUPDOWN_WPA_SECRET = ShapeRule(
    "ifupdown_wpa_secret",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:"
        + _WPA_SECRET
        + r"[ \t]+"
        + FRESH
        + r"(?P<value>[^\s\x00](?:[^\r\n\x00]{0,4094}[^\s\x00])?)|"
        + _COMMENTED
        + _WPA_SECRET
        + r"[ \t]+"
        + FRESH
        + r"(?!"
        + _PROSE_THEN_WORDS
        + r")(?P<v2>"
        + QUOTED
        + r"|[^\s\x00\"']{1,4096}+))"
    ),
    contains("wpa-"),
)

# What a word after "password" at a line's start says when it is no value: "password changed".
_PASSWORD_STATES = (
    "required", "expired", "changed", "updated", "incorrect", "correct", "invalid", "wrong",
    "mismatch", "accepted", "rejected", "denied", "ok", "failed", "reset", "set", "unset", "none",
    "empty", "missing", "prompt", "protected", "authentication", "login",
)  # fmt: skip
_PROSE_OR_STATE = (
    r"(?i:"
    + "|".join(re.escape(word) for word in sorted({*_PASSWORD_STATES, *_PROSE_WORDS}, key=len, reverse=True))
    + ")"
)
_NOT_A_PASSWORD = r"(?:" + _PROSE_OR_STATE + r"[,.:;!]?[ \t]*(?:\r?\n|\x00|\Z))"
# A word of prose or a state where a value would be, wherever it is on its line ("user alice
# with password reset" in a log): the rules of sonde.agent.scrub_app_configs skip it.
PROSE_OR_STATE_WORD = r"(?:" + _PROSE_OR_STATE + r"[,.:;!]?(?![^\s\x00]))"
# A line "password PW" and nothing else (maybe indented or commented out): msmtp's msmtprc, a
# ~/.netrc written one word pair a line ("machine h\n  login u\n  password PW"), fetchmail-like
# rc files. Lowercase, one value (a word or quoted) that is no word of prose or a state ("password
# changed", "password required") nor a mask ("password ********"); PAM's "password requisite
# pam_unix.so" has more words.
PASSWORD_LINE = ShapeRule(
    "password_line",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:#[#; \t]{0,16}+)?password[ \t]++"
        + FRESH
        + r"(?!"
        + _NOT_A_PASSWORD
        + r")(?!(?:\"\"|''|\*++)[ \t]*(?:\r?\n|\x00|\Z))(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"'][^\s\x00]{0,4095}+)[ \t]*+(?=\r?\n|\x00|\Z)"
    ),
    contains("password"),
)

# snmpd.conf's communities (a community is a password; "public" too): rocommunity, rwcommunity
# (and their IPv6 forms) and trapcommunity COMMUNITY, com2sec[6] [-Cn CONTEXT] NAME SOURCE
# COMMUNITY, the trap sinks' trapsink|trap2sink|informsink HOST COMMUNITY [PORT], snmptrapd.conf's
# authCommunity TYPES COMMUNITY [SOURCE ...] (a synopsis' "[COMMUNITY" is none); at a line's
# start, maybe indented or commented out, no word of prose ("# rocommunity is ..." stays;
# snmpd.conf's "#  rocommunity: a SNMPv1/SNMPv2c read-only access community name" too).
SNMPD_COMMUNITY = ShapeRule(
    "snmpd_community",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:"
        + _COMMENTED
        + r")?(?i:(?:ro|rw)community6?|trapcommunity|com2sec6?(?:[ \t]+-Cn[ \t]+[^\s\x00]{1,256}+)?"
        r"(?:[ \t]+[^\s\x00]{1,256}+){2}|authcommunity[ \t]+(?:log|execute|net)(?:,(?:log|execute|net)){0,2}+"
        r"|(?:trap2?|inform)sink[ \t]+(?!"
        + _PROSE_THEN_WORDS
        + r")[^\s\x00]{1,256}+)(?:[ \t]+-(?:Cn|V)[ \t]+[^\s\x00]{1,256}+){0,2}+[ \t]+"
        + FRESH
        + r"(?!"
        + _PROSE_THEN_WORDS
        + r")(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"'\[-][^\s\x00\"']{0,4095}+)"
    ),
    contains_folded("community", "com2sec", "sink"),
)

# snmpd.conf's trapsess [-v VERSION] [-c COMMUNITY | -u USER -a SHA -A AUTHPASS -x AES -X
# PRIVPASS ...] HOST: each secret flag's value, as the snmp tools read them.
SNMPD_TRAPSESS = ShapeRule(
    "snmpd_trapsess",
    re.compile(r"(?<![^\n\x00])[ \t]*+(?:" + _COMMENTED + r")?trapsess(?P<value>[ \t][^\r\n\x00]{1,8192}+)"),
    contains("trapsess"),
    inner=SNMP_FLAG_VALUES,
)

# snmpd.conf's SNMPv3 users: createUser [-e ENGINEID] NAME (MD5|SHA...) AUTHPASS [(DES|AES...)
# [PRIVPASS]] (-l or -m before a localized key): each passphrase after its protocol.
SNMPD_CREATE_USER = ShapeRule(
    "snmpd_create_user",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:"
        + _COMMENTED
        + r")?createUser(?:[ \t]+-e[ \t]+[^\s\x00]{1,256}+)?[ \t]+[^\s\x00]{1,256}+"
        r"(?P<value>[ \t]+(?i:MD5|SHA)[^\r\n\x00]{0,8192}+)"
    ),
    contains("createUser"),
    inner=re.compile(
        r"(?<![^ \t])(?i:MD5|SHA(?:-?\d{3})?|DES|AES(?:-?\d{3}C?)?)[ \t]+(?:-[lm][ \t]+)?"
        + FRESH
        + r"(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095}+)"
    ),
)

# haproxy.cfg: stats auth USER:PW, and a userlist's user NAME [insecure-]password PW|HASH.
HAPROXY_PASSWORD = ShapeRule(
    "haproxy_password",
    re.compile(
        r"(?<![^\n\x00])[ \t]*+(?:stats[ \t]+auth[ \t]+[^\s\x00:]{1,256}+:"
        + FRESH
        + r"(?P<value>[^\s\x00]{1,4096}+)|user[ \t]+[^\s\x00]{1,256}+[ \t]+(?:insecure-)?password[ \t]+"
        + FRESH
        + r"(?P<v2>[^\s\x00]{1,4096}+))"
    ),
    contains("stats", "password"),
)

# A gossip encryption key (Consul's and Nomad's "encrypt"): 16 or 32 bytes in base64, in a config
# file (encrypt = "KEY", "encrypt": "KEY", encrypt: KEY) or a flag (-encrypt=KEY); and any quoted
# value of "encrypt" in HCL or JSON (encrypt = "X", "encrypt": "X"), where it is always the key
# (one of another length, or not base64, is a key all the same), but a boolean, a template or a
# variable's reference ("${var.gossip_key}", "{{ key ... }}"); YAML's "encrypt: sha512_crypt"
# (Ansible's vars_prompt) names an algorithm.
_NOT_A_KEY = r"(?!(?i:true|false|yes|no|on|off)\"|\$\{|\{\{)"
GOSSIP_ENCRYPT_KEY = ShapeRule(
    "gossip_encrypt_key",
    re.compile(
        r"(?<![\w.-])(?:(?:-{1,2}|[\"']?)encrypt[\"']?[ \t]*[:=][ \t]*[\"']?"
        + FRESH
        + r"(?P<value>[A-Za-z0-9+/]{22}==|[A-Za-z0-9+/]{43}=)(?![A-Za-z0-9+/=])"
        + r"|(?:encrypt[ \t]*=|\"encrypt\"[ \t]*:)[ \t]*\""
        + FRESH
        + _NOT_A_KEY
        + r"(?P<v2>(?:[^\"\\\r\n\x00]|\\[^\r\n\x00]){1,4096}+)(?:\"|"
        + CUT
        + "))"
    ),
    contains("encrypt"),
)

"""The scrubber's rules for the tools that set or hash a password given on their command line.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others, written in the grammar of `sonde.agent.scrub_commands`: the
input ``chpasswd`` and ``passwd`` read, echoed or printed into their pipe or given as a
here-string (``echo u:PW | chpasswd``, ``echo PW | passwd --stdin u``, ``passwd --stdin u <<<
PW``), and ``openssl passwd``'s plaintext arguments. A variable's reference (``"$PW"``) or
printf's format (``'%s\\n'``) is no password. The argv form of ``openssl passwd`` is
`sonde.agent.scrub_argv`'s. Every repetition is bounded and most are possessive: hostile text
scrubs in linear time.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_commands import ECHOED
from sonde.agent.scrub_gates import contains
from sonde.agent.scrub_shapes import FRESH, QUOTED, ShapeRule

# A program run from /usr/bin or /usr/sbin, maybe under sudo.
_SUDO = r"(?:sudo(?:[ \t]+-[^\s\x00]{1,64}+)*+[ \t]+)?(?:/usr)?(?:/s?bin/)?"
# A variable's reference or a command's output as a whole word ("$PW", ${PW}, "$(cat f)"): the
# shell's, not a password.
_REFERENCE = r"\"?\$(?:\{[A-Za-z_]\w{0,64}+\}|[A-Za-z_]\w{0,64}+|\()"
# printf's format before the words it prints: "%s\n", '%s\n%s\n'.
_PRINTF_FORMAT = r"(?:'(?:%s|\\n|[ \t]){1,16}+'|\"(?:%s|\\n|[ \t]){1,16}+\")(?![^\s\x00])"
_PRINTED = r"(?<![\w.-])printf[ \t]{1,16}+(?:--[ \t]{1,16}+)?(?:" + _PRINTF_FORMAT + r"[ \t]{1,16}+)?+"

# chpasswd's input on its command line: echo|printf USER:PW ... | [sudo] chpasswd, chpasswd <<<
# USER:PW; each USER:PW of it (echo -e "a:PW1\nb:PW2").
_CHPASSWD = _SUDO + r"chpasswd(?![\w.-])"
_CHPASSWD_INPUT = r"(?:" + QUOTED + r"|[^\s\x00\"'|;&<>][^\s\x00|;&<>]{0,4095}+)"
CHPASSWD_INPUT = ShapeRule(
    "chpasswd_input",
    re.compile(
        r"(?:"
        + ECHOED
        + r"|"
        + _PRINTED
        + r")(?P<value>"
        + _CHPASSWD_INPUT
        + r")(?=[ \t]*\|[ \t]*"
        + _CHPASSWD
        + r")|(?<![\w.-])chpasswd(?:[ \t]+-[^\s\x00<]{1,64}+){0,8}+[ \t]*<<<[ \t]*(?P<v2>"
        + _CHPASSWD_INPUT
        + r")"
    ),
    contains("chpasswd"),
    inner=re.compile(
        r"(?:(?<=[\s\"'<])|(?<=\\n)|(?<![^\n\x00]))[^\s\x00:\"'\\]{1,256}+:"
        + FRESH
        + r"(?P<value>(?:[^\r\n\x00\"'\\]|\\(?!n))+)"
    ),
)

# passwd reading the new password on its standard input (Red Hat's and SUSE's passwd --stdin;
# echo -e "PW\nPW" | passwd USER answers both of its prompts): the words echo or printf (after
# its format) prints into [sudo] passwd's pipe, and a here-string (passwd --stdin USER <<< PW).
_PASSWD = _SUDO + r"passwd(?![\w.-])"
_INPUT_WORD = r"(?:" + QUOTED + r"|[^\s\x00\"'|;&<>()][^\s\x00|;&<>()]{0,4095}+)"
PASSWD_STDIN = ShapeRule(
    "passwd_stdin",
    re.compile(
        r"(?:"
        + ECHOED
        + r"|"
        + _PRINTED
        + r")"
        + FRESH
        + r"(?!"
        + _REFERENCE
        + r")(?P<value>"
        + _INPUT_WORD
        + r"(?:[ \t]{1,16}+"
        + _INPUT_WORD
        + r"){0,15}+)(?=[ \t]*\|[ \t]*"
        + _PASSWD
        + r")|(?<![\w.-])passwd(?:[ \t]+[^\s\x00<|;&]{1,256}+){0,8}+[ \t]*<<<[ \t]*"
        + FRESH
        + r"(?!"
        + _REFERENCE
        + r")(?P<v2>"
        + _INPUT_WORD
        + r")"
    ),
    contains("passwd"),
)

# openssl passwd [-1|-5|-6|-apr1|-aixmd5] [-salt SALT] [-in FILE|-stdin] PASSWORD...: each
# plaintext argument (flags, the values of -salt, -in, -rand ... and those hidden in a pass before
# skipped); -stdin and -in read it elsewhere. Its argv form: sonde.agent.scrub_argv_programs.
OPENSSL_PASSWD_VALUED = ("-salt", "-in", "-rand", "-writerand", "-provider", "-provider-path", "-propquery")
_OPENSSL_PASSWD_ITEMS = (
    r"(?:[ \t]+(?:(?:"
    + "|".join(re.escape(flag) for flag in sorted(OPENSSL_PASSWD_VALUED, key=len, reverse=True))
    + r")[ \t]+[^\s\x00]{1,4096}+|-[^\s\x00]{1,64}+|[\"']?\[REDACTED\][\"']?)){0,32}+"
)
OPENSSL_PASSWD = ShapeRule(
    "openssl_passwd",
    re.compile(
        r"(?<![\w.-])openssl[ \t]+passwd"
        + _OPENSSL_PASSWD_ITEMS
        + r"[ \t]+"
        + FRESH
        + r"(?!"
        + _REFERENCE
        + r")(?P<value>"
        + QUOTED
        + r"|[^\s\x00\"'<>|;&()\[{-][^\s\x00\"'<>|;&()]{0,4095}+)"  # "[-salt" in a synopsis is none
    ),
    lambda text, lower: "openssl" in text and "passwd" in text,
    again=True,
)
# openssl passwd ... -- PW...: after "--" every word is a plaintext, one starting with "-" too;
# hidden to the command's end as one.
OPENSSL_PASSWD_AFTER_END = ShapeRule(
    "openssl_passwd_after_end",
    re.compile(
        r"(?<![\w.-])openssl[ \t]+passwd(?:[ \t]+[^\s\x00|;&<>]{1,4096}+){0,32}?[ \t]+--[ \t]+"
        + FRESH
        + r"(?P<value>[^\s\x00|;&<>][^\x00\r\n|;&<>]{0,4095}+)"
    ),
    lambda text, lower: "openssl" in text and "passwd" in text and " -- " in text,
)

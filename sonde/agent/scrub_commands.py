"""The grammar of a shell command line that the program rules of scrub_programs are written in.

Regex *fragments*, not compiled rules: the separators that end a command, a program's
reach along its line, its later words and positional items, the flags a program takes
with a value (the argv form, `sonde.agent.scrub_argv_programs`, reads the same tables), and where
a command starts (a line's start, maybe after ps's columns, xtrace's "+ ", history's
number or an indent, then maybe a wrapper such as sudo; or any command's ";", where prose
may read the same). `sonde.agent.scrub_programs` builds its program
rules (`program_password_flag`, `program_password_word` ...) from them. A fragment is
pasted into larger patterns, often several times over, so every repetition in it is
bounded and most are possessive (``{0,256}+``, ``*+``: no backtracking into them): hostile
text scrubs in linear time, whatever rule a fragment lands in.
"""

from __future__ import annotations

import re

# A shell command separator standing alone as a word ("a && b", "a | b", "a ; b"): the command
# before it ends there. One glued to a word ("x;", "?a=1&b=2" in a URL) is no separator here.
_SEPARATOR = r"(?:&&|\|\||;|\|)"
SEPARATOR_WORD = _SEPARATOR + r"(?![^\s\x00])"
# A separator glued to the end of a word ("PW;", "PW&&", "PW|"): a shell ends the command there,
# so that word is its command's last. (Only looked at where a secret's place depends on it; a
# password hidden with its glued ";" is over-redaction, not a leak.)
_GLUED_SEPARATOR = r"(?:(?<=;)|(?<=&&)|(?<=\|))"
NOT_GLUED_SEPARATOR = r"(?<!;)(?<!&&)(?<!\|)"
# The separator words a program's reach stops at: not ";", which a joined argv holds inside
# one item often enough (ps prints `mysql -e SELECT 1 ; SELECT 2 -pX` unquoted) for a
# password after it to be missed; a port hidden after "a ; b" is the lesser harm.
REACH_SEPARATOR = r"(?:&&|\|\||\|)"
# One character of a program's reach along its line (to a line end, a NUL or a separator
# word): "docker login -p x && docker run -p 8080:80" is two commands, the port no password.
REACH = r"(?:[^\r\n\x00 \t]|[ \t](?!" + REACH_SEPARATOR + r"[ \t]))"
# After a program's name and a space, a later word of its command: "redis-cli -h db AUTH".
LATER = r"(?=[ \t])" + REACH + r"{0,200}?[ \t]"
# The flags of a program that take a value (the next item) and are not secrets: a word after
# one is its value, not a word of the program ("redis-cli -h auth ping"). The argv form uses
# them too (sonde.agent.scrub_argv_programs).
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
LDAP_PASSWORD_FLAG = r"-[" + LDAP_SWITCHES + r"]{0,16}+w"  # -w, -xw, -ZZxw
LDAPPASSWD_PASSWORD_FLAG = r"-[" + LDAPPASSWD_SWITCHES + r"]{0,16}+[asw]"  # and -a OLD, -s NEW
VAULT_VALUED = (
    "-method", "-path", "-address", "-namespace", "-ns", "-field", "-format", "-ca-cert", "-ca-path",
    "-client-cert", "-client-key", "-tls-server-name", "-wrap-ttl", "-mfa", "-header", "-agent-address",
)  # fmt: skip


def flags_then(valued: tuple[str, ...]) -> str:
    """Any flags (a valued one with its value) before the next item: "-v", "-n rabbit@h"."""
    names = "|".join(re.escape(name) for name in sorted(valued, key=len, reverse=True))
    return r"(?:[ \t]+(?:(?:" + names + r")[ \t]+[^\s\x00]{1,256}+|-[^\s\x00]{1,256}+))*+"


# One positional item (not a flag, nor a separator word) of a command line.
ITEM = r"[ \t]+(?!" + SEPARATOR_WORD + r")[^\s\x00-][^\s\x00]{0,4095}+"
_PATH = r"(?:[^\s\x00/;]{0,255}+/){0,32}+"  # a program's directory: /usr/bin/ (a ";" ends a command)
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
# "%d/%m/%y %T ", maybe bracketed, "%s " (a 10-digit epoch), "%b %d %H:%M " ("May 01 10:00",
# "%e": "May  1")), zsh's alike (history -i: "2024-05-01 10:00  "); bash's `fc -l`: the number
# unpadded, a TAB, then " " or "*" ("5\t isql", "501\t*isql"; `fc -ln`: no number). The
# number's exact columns: "3 isql sessions ..." and a table's "5\tisql" are no history line.
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_HISTORY_TIME = (
    r"(?:\[?(?:\d{4}-\d\d-\d\d|\d{1,2}[/.]\d{1,2}[/.]\d{2,4})[ T]\d\d:\d\d(?::\d\d)?\]?|\d{10}"
    r"|" + _MONTH + r" {1,2}\d{1,2} \d\d:\d\d(?::\d\d)?)[ \t]{1,16}+"
)
_HISTORY = (
    r"(?:(?: {4}\d| {3}\d\d| {2}\d{3}| \d{4}|\d{5,10}+)[ *] (?:" + _HISTORY_TIME + r")?|\d{0,10}+\t[ *])"
)
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
# What follows a command's start: maybe commands without arguments glued to a ";" ("date; "),
# then maybe a wrapper and up to 8 of its items, then the program's directory: "isql", "sudo -u
# app /usr/bin/isql", "timeout 30 isql".
_COMMAND_RUN = (
    _LEADING_COMMANDS
    + r"(?:"
    + _PATH
    + "(?:"
    + "|".join(_WRAPPERS)
    + r")(?:[ \t]+[^\s\x00]{1,256}+){0,8}?[ \t]+)?"
    + _PATH
)
# The start of a command (not prose): a line's start (maybe after ps's columns, xtrace's "+ ",
# history's number, or blanks: a script's indented block, a CI file's "run: |"), a separator
# word's end ("cd /x && isql ...") or a known command's glued ";"; then `_COMMAND_RUN`.
COMMAND_START = (
    r"(?:(?<![^\n\x00])(?:"
    + _PS_COLUMNS
    + "|"
    + _XTRACE
    + "|"
    + _HISTORY
    + r"|[ \t]{1,64}+)?|(?:(?<=[ \t]&&)|(?<=[ \t]\|\|)|(?<=[ \t][;|]))[ \t]{1,16}+|"
    + _SETUP_COMMAND
    + r")"
    + _COMMAND_RUN
)
# After a ";", anywhere on a line: the command before it ended there, whatever its arguments
# ("cat /etc/odbc.ini; isql ..."), maybe then a shell keyword ("if test -f x; then isql ...",
# "for f in *; do ..."); then `_COMMAND_RUN`. Prose reads so too ("notes; isql is the unixODBC
# client"): a rule starting a command here asks it to end after its password (`ITEMS_END`).
AFTER_SEMICOLON = r"(?<=;)[ \t]{0,16}+(?:(?:then|do|else)[ \t]{1,16}+)?" + _COMMAND_RUN


# Where text a command reads starts on its line: echo's words (after -n, -e, -E), a here-string's
# ("<<< 'a b'"), maybe quoted (the quote is not consumed here).
ECHOED = r"(?:(?<![\w.-])echo(?:[ \t]{1,16}+-[neE]{1,3}+){0,3}+[ \t]{1,16}+|<<<[ \t]{0,16}+)"


# sshpass's own options before the -p that a match ends with: its options end at the program it
# runs ("sshpass -p PW ssh -p 2222 host": ssh's -p is a port). -f FILE, -d FD, -P PROMPT and an
# earlier -p PW (hidden in a pass before) take a value; a flag is never read as one.
SSHPASS_OPTIONS = (
    r"(?:[ \t]+(?:-[fdPp][ \t]*+[^\s\x00-][^\s\x00]{0,4095}+|-[^\s\x00fdPp][^\s\x00]{0,255}+)){0,16}?"
)
# vault login's items before its token, at the start of a command: flags (a valued one with its
# value), NAME=VALUE pairs and items hidden in a pass before. As the argv form reads it, every
# item after them is a token too: "vault login TOKEN extra".
VAULT_BEFORE_TOKEN = (
    r"(?:[ \t]+(?:(?:"
    + "|".join(re.escape(name) for name in sorted(VAULT_VALUED, key=len, reverse=True))
    + r")[ \t]+[^\s\x00]{1,4096}+|-[^\s\x00]{0,4096}+|[^\s\x00=\[]{0,4096}+[=\[][^\s\x00]{0,4096}+))*+"
)
# A token (not a NAME=VALUE pair, not hidden in part already: hvs.[REDACTED]); a word ending
# with ":" or "," is prose ("vault login failed: permission denied").
VAULT_TOKEN = r"[ \t]+[^\s\x00\"'=\[-][^\s\x00\"'=\[]{0,4095}+(?<![:,])(?![^\s\x00])"
# A token by its shape (hvs., hvb., hvr.; before Vault 1.10 s., b., r.; before 1.0 a UUID), maybe
# with a separator glued to it: a token wherever it is, more words after it or not.
VAULT_TOKEN_SHAPE = (
    r"[ \t]+(?:(?:hv[sbr]|[sbr])\.[A-Za-z0-9_-]{16,4096}+(?:\.[A-Za-z0-9]{1,64}+)?"
    r"|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})(?:;|&&|\|\|?)?(?![^\s\x00])"
)
# A token whose command ends at a separator glued to it, whatever follows ("TOKEN;vault status").
VAULT_TOKEN_GLUED = r"[ \t]+[^\s\x00\"'=\[;&|-][^\s\x00\"'=\[;&|]{0,4095}+(?:;|&&|\|)"
# The end of a command after its last item: the text's or a line's end, a separator word, or a
# separator glued to that item ("vault login TOKEN; vault status").
COMMAND_END = r"(?:[ \t]*(?:\r?\n|\x00|\Z)|[ \t]+" + SEPARATOR_WORD + "|" + _GLUED_SEPARATOR + ")"
# The end of a command's items: `COMMAND_END`, or a redirection ("< q.sql", "> out.csv", "2>&1").
ITEMS_END = r"(?:" + COMMAND_END + r"|[ \t]+(?:\d?[<>]|&>))"

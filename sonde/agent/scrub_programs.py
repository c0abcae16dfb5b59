"""The scrubber's rules for programs' command lines: the passwords a program takes as arguments.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others, written in the command-line grammar of
`sonde.agent.scrub_commands`: a program's name, then its flags and words within its reach
along the line (to a separator word: "a && b" is two commands). A rule that may find several
values on a line (``again``) runs again on the lines where it found one. The same programs
read as an argv list (a list of strings) are `sonde.agent.scrub_argv`'s. Every repetition is
bounded and most are possessive: hostile text scrubs in linear time.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_commands import (
    AFTER_SEMICOLON,
    COMMAND_END,
    COMMAND_START,
    ISQL_VALUED,
    ITEM,
    ITEMS_END,
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
from sonde.agent.scrub_gates import contains, contains_folded
from sonde.agent.scrub_shapes import CUT, FRESH, QUOTED, ShapeRule

# htpasswd -b[other letters] [FILE] USER PASSWORD: FILE is absent with -n.
_HTPASSWD_OPTS = r"(?:[ \t]+-[A-Za-z]{1,8}(?:[ \t]+\d{1,3}(?=[ \t]))?){1,6}+"
_HTPASSWD_HAS = r"(?=(?:[ \t]+-[A-Za-z]{1,8}(?:[ \t]+\d{1,3})?){0,5}?[ \t]+-[A-Za-z]{0,7}"
_HTPASSWD_WORD = r"[ \t]+[^\s\x00-][^\s\x00]{0,4095}+"

# unixODBC's isql DSN USER before its password (Sybase isql's valued flags skipped).
_ISQL_TO_PASSWORD = r"iu?sql(?=[ \t])" + (flags_then(ISQL_VALUED) + ITEM) * 2 + flags_then(ISQL_VALUED)
# An unquoted value a program's word announces (a flag or a NAME=VALUE pair is none).
_WORD_VALUE = r"[^\s\x00\"'=-][^\s\x00\"']{0,4095}"

# The gate of program_password_flag: "-P" for zip, unzip, ipmitool, sqlcmd, bcp and the
# mosquitto clients (one needle, not six); "net " for samba's net.
_FLAG_PROGRAMS = (
    "redis-", "valkey-", "keydb-", "sshpass", "mongo", "ldap", "curl", "login", "smb", "rpcclient", "net ",
    "lftp", "etcdctl", "-P", "7z", "rar", "freerdp", "rdesktop", "ncftp", "openssl", "ETCDCTL_USER",
    "ssh-keygen", "--sse-c", "rabbitmqadmin", "cqlsh", "encrypt", "frp", "az ",
)  # fmt: skip
# The gate of program_password_word: "alias" and "mc " for mc, "aws_se" for aws.
_WORD_PROGRAMS = (
    "redis-", "valkey-", "keydb-", "rabbitmqctl", "nmcli", "aws_se", "mysqladmin", "mariadb-admin", "alias",
    "mc ", "mc\t", "mcli", "vault", "isql", "iusql", "wpa_passphrase", "ngrok", "reset-admin-password",
)  # fmt: skip
# The Redis clients: redis-cli and its forks' (Valkey's, KeyDB's); their benchmarks take -a and
# run AUTH alike.
_REDIS_CLIENTS = r"(?:redis|valkey|keydb)-(?:cli|benchmark)"
# A flag's value that is no empty string: ssh-keygen -N "" asks for no passphrase.
_NOT_EMPTY = r"(?!(?:\"\"|'')(?![^\s\x00]))"

# The password flags of known programs on a command line (within 200 characters of the
# program's name, before a separator word: "a && b"): redis-cli's -a (valkey-cli's, keydb-cli's and
# their benchmarks' too), sshpass's own -p (before
# the program it runs), the mongo tools' -p, the ldap tools' -w (ldappasswd's -a OLD, -s NEW;
# maybe after switches clustered with it: -xw PW, -ZZxwPW),
# curl's -u/--user/-U/--proxy-user and etcdctl's --user user:SECRET (its ETCDCTL_USER=
# user:SECRET too: "user" describes a name, so the name rules keep it), docker/podman login
# -p, the samba tools' (net's too) -U user%SECRET, lftp -u user,SECRET, zip/unzip/ipmitool/
# sqlcmd/bcp and the mosquitto clients' -P, 7z's and rar's -pSECRET (rar -hpSECRET; -p- is
# no password), xfreerdp /p:SECRET, rdesktop and the ncftp tools' -p, openssl -k|-K, Sybase
# isql's and sqsh's -P SECRET|-PSECRET, ssh-keygen -P OLD -N NEW (-N "": no passphrase), curl
# --oauth2-bearer, aws --sse-c-key|--sse-c-copy-source-key, rabbitmqadmin's and cqlsh's -p,
# consul's and nomad's -encrypt KEY|=KEY, frpc's and frps's -t, az login's and az acr's -p (as
# docker login's: -p PW, -pPW, -p=PW); every one of them on the line.
# The argv form: sonde.agent.scrub_argv.
PROGRAM_PASSWORD_FLAG = ShapeRule(
    "program_password_flag",
    re.compile(
        r"(?<![\w.-])(?:" + _REDIS_CLIENTS + REACH + r"{0,200}?[ \t]-a[ \t]+"
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
        r"login" + REACH + r"{0,200}?[ \t]-p(?:[ \t]+|=|(?!=))"
        # az login's -p, az acr's: the first of these words is its command (atomic: one per az)
        r"|az(?=[ \t])(?>"
        + REACH
        + r"{0,200}?[ \t](?:login|acr)(?=[ \t]))"
        + REACH
        + r"{0,200}?[ \t]-p(?:[ \t]+|=|(?!=))"
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
        r"|ssh-keygen" + REACH + r"{0,200}?[ \t]-[NP][ \t]*"
        r"|curl" + REACH + r"{0,200}?[ \t]--oauth2-bearer(?:[ \t]+|=)"
        r"|aws" + REACH + r"{0,200}?[ \t]--sse-c(?:-copy-source)?-key(?:[ \t]+|=)"
        r"|(?:rabbitmqadmin|cqlsh)(?=[ \t])" + REACH + r"{0,200}?[ \t]-p[ \t]*"
        r"|(?:consul|nomad)(?=[ \t])" + REACH + r"{0,200}?[ \t]--?encrypt(?:[ \t]+|=)"
        r"|frp[cs](?=[ \t])" + REACH + r"{0,200}?[ \t]-t[ \t]*"
        r")" + FRESH + _NOT_EMPTY + r"(?P<value>" + QUOTED + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095})"
    ),
    contains(*_FLAG_PROGRAMS),
    again=True,
)

# The password a known program's word announces on a command line (within 200 characters
# of the program's name, before a separator word, followed by a space: "mysqladmin:
# [Warning] Using a password on" is a message; not the value of a flag: "redis-cli -h auth
# ping"): redis-cli AUTH [user] SECRET (HELLO 3 AUTH user SECRET; MIGRATE ... AUTH SECRET
# KEYS k | AUTH2 user SECRET) and CONFIG SET requirepass|masterauth SECRET, rabbitmqctl
# add_user|change_password [flags] USER SECRET, nmcli ... password|wifi-sec.psk SECRET, aws
# configure set [profile.NAME.]aws_secret_access_key SECRET, mysqladmin|mariadb-admin password
# SECRET, ngrok config add-authtoken|add-api-key SECRET (ngrok authtoken SECRET), wpa_passphrase
# SSID SECRET (valkey-cli and keydb-cli as redis-cli), grafana-cli|grafana cli ... reset-admin-password
# SECRET, mc
# alias set NAME URL ACCESSKEY SECRET, mc admin user add ALIAS ACCESSKEY SECRET and mc config
# host add ALIAS URL ACCESSKEY SECRET, vault login [flags] TOKEN [flags] (the last item of its
# command but flags, or one with a token's shape: "ran: vault login s.X -no-print now"; at the
# start of a command every item but flags and NAME=VALUE pairs, as the argv form reads it:
# vault login TOKEN extra; never a word ending with ":": "vault login failed: ..."), and
# unixODBC's isql DSN USER SECRET (at the start of a command: a line's start, maybe after ps's
# columns, xtrace's "+ " (zsh's "+NAME:LINE> ", maybe after a CI log's time), history's
# number and time or blanks (an indented block), after a separator word or a known command's
# glued ";" (cd /srv; isql ...), maybe after commands without arguments glued to a ";" (date;
# ls; isql ...); maybe after sudo, timeout N ...: "the isql client" is prose; or after any
# command's ";" (cat /etc/odbc.ini; isql ...; if x; then isql ...) when the password ends the
# command: "notes; isql is the unixODBC client" is prose). Every one of a program's words on
# the line.
PROGRAM_PASSWORD_WORD = ShapeRule(
    "program_password_word",
    re.compile(
        r"(?<![\w.-])(?:"
        + _REDIS_CLIENTS
        + LATER
        + r"(?<![ \t]-[hpsaunridDt][ \t])(?:(?i:auth2)[ \t]+[^\s\x00]{1,256}+"
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
        r"|(?:mysqladmin|mariadb-admin)" + LATER + r"password"
        r"|ngrok" + LATER + r"(?:add-authtoken|authtoken|add-api-key)"
        r"|grafana(?:-cli)?" + LATER + r"reset-admin-password"
        # wpa_passphrase SSID PASSPHRASE (no passphrase: it reads stdin; "< file" is none)
        r"|wpa_passphrase[ \t]+(?:" + QUOTED + r"|[^\s\x00\"'<>|;&][^\s\x00]{0,255}+)(?=[ \t]+[^\s\x00<>])"
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
        + r")|"
        + _ISQL_TO_PASSWORD
        + r")|"
        + AFTER_SEMICOLON
        + _ISQL_TO_PASSWORD
        # here the command ends after its password: "notes; isql is the unixODBC client" is prose
        + r"(?=[ \t]+(?:"
        + QUOTED
        + "|"
        + _WORD_VALUE
        + r"+)"
        + flags_then(ISQL_VALUED)
        + ITEMS_END
        + r"))[ \t]+"
        + FRESH
        + r"(?!"
        + SEPARATOR_WORD
        + r")(?P<value>"
        + QUOTED
        + r"|"
        + _WORD_VALUE
        + ")"
    ),
    contains(*_WORD_PROGRAMS),
    again=True,
)

# The values of the snmp tools' secret flags: -A AUTHPASS, -X PRIVPASS and -c COMMUNITY (the
# default community "public" too: a community is a password); snmpd.conf's trapsess reads them so.
SNMP_FLAG_VALUES = re.compile(
    r"(?<![^ \t])-[AXc][ \t]*" + FRESH + r"(?P<value>" + QUOTED + r"|[^\s\x00\"'-][^\s\x00\"']{0,4095})"
)
# The snmp tools' secret flags, all of them in its command. snmpd's -c is its config file.
SNMP_SECRETS = ShapeRule(
    "snmp_secrets",
    re.compile(
        r"snmp(?<![\w.-]snmp)(?:get(?:next)?|bulk(?:get|walk)|walk|set|trap|inform|table|delta|df|status"
        r"|test|netstat|usm|vacm)(?P<value>[ \t]" + REACH + r"{1,8192}+)"
    ),
    contains("snmp"),
    inner=SNMP_FLAG_VALUES,
)

# redis-cli ACL SETUSER user [rules]: every >SECRET (a password added) and <SECRET (one
# removed) in its command; a #hash stays.
REDIS_ACL_PASSWORDS = ShapeRule(
    "redis_acl_passwords",
    re.compile(
        r"(?:redis-cli(?<![\w.-]redis-cli)|valkey-cli(?<![\w.-]valkey-cli)|keydb-cli(?<![\w.-]keydb-cli))"
        + LATER
        + r"(?i:acl)[ \t]+(?i:setuser)(?P<value>[ \t]"
        + REACH
        + r"{1,8192}+)"
    ),
    contains_folded("setuser"),
    inner=re.compile(r"(?<![^ \t])[<>]" + FRESH + r"(?P<value>[^\s\x00]{1,4096}+)"),
)

# mysql -pSECRET on a command line (within 200 characters, before any other mysql or a separator
# word); each of them. Every client of MySQL and MariaDB (mysqldump, mariadb-dump, mysqlbinlog,
# mysqlsh ...) and the backup tools (mariabackup, xtrabackup) read -p so.
MYSQL_P = ShapeRule(
    "mysql_p",
    re.compile(
        r"(?:mysql(?<![\w-]mysql)|mariadb(?<![\w-]mariadb)|mariabackup(?<![\w-]mariabackup)"
        r"|xtrabackup(?<![\w-]xtrabackup))[\w-]*+"
        r"(?:[^\r\n\x00 \tm]|m(?!ysql|ariadb)|[ \t](?!"
        + REACH_SEPARATOR
        + r"[ \t])){0,200}?[ \t]-p"
        + FRESH
        + r"(?P<value>[^\s\x00\"']+)"
    ),
    contains("mysql", "mariadb", "mariabackup", "xtrabackup"),
    again=True,
)

# Oracle logins: jdbc:oracle:thin:USER/PASSWORD@host, sqlplus USER/PASSWORD@db (and its kin);
# a double-quoted password may hold "@" and spaces: scott/"p@ss word"@db.
ORACLE_LOGIN = ShapeRule(
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
    contains_folded("sqlplus", "oracle:", "sqlldr", "expdp", "impdp", "rman", "dgmgrl"),
)

# rman's other logons in its command: target|catalog|auxiliary USER/SECRET[@db] (or =USER/...).
RMAN_LOGONS = ShapeRule(
    "rman_logons",
    re.compile(r"rman(?<![\w.-]rman)(?P<value>[ \t]" + REACH + r"{1,8192}+)"),
    contains("rman"),
    inner=re.compile(
        r"(?<![\w.-])(?i:target|catalog|auxiliary)(?:[ \t]+|=)[^\s\x00/@\"'():=]{1,128}+/"
        + FRESH
        + r"(?P<value>\"[^\"\r\n\x00]{1,256}+\"|[^\s\x00@\"'/]{1,256}+)(?![^\s\x00@])"
    ),
)

# htpasswd -b [FILE] USER PASSWORD (-n: no FILE), mosquitto_passwd -b FILE USER PASSWORD.
HTPASSWD_B = ShapeRule(
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
    contains("htpasswd", "mosquitto_passwd"),
)

# kubectl create secret ... --from-literal=KEY=SECRET (oc's alike): the value of each literal,
# after its key (maybe quoted whole: --from-literal="KEY=SECRET"); a configmap's stay.
KUBECTL_SECRET_LITERALS = ShapeRule(
    "kubectl_secret_literals",
    re.compile(
        r"(?<![\w.-])(?:kubectl|oc)(?=[ \t])"
        + REACH
        + r"{0,200}?[ \t]secret(?P<value>[ \t]"
        + REACH
        + r"{1,8192}+)"
    ),
    contains("--from-literal"),
    inner=re.compile(
        r"(?<![^ \t])--from-literal(?:=|[ \t]+)(?:\"[^\s\x00=\"]{1,253}+="
        + FRESH
        + r"(?P<value>[^\"\r\n\x00]{1,4096}+)"
        r"|'[^\s\x00=']{1,253}+=" + FRESH + r"(?P<v2>[^'\r\n\x00]{1,4096}+)"
        r"|[^\s\x00=\"']{1,253}+=" + FRESH + r"(?P<v3>" + QUOTED + r"|[^\s\x00\"']{1,4096}+))"
    ),
)

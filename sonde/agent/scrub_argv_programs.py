"""Which programs take a password where in their command line, for `sonde.agent.scrub_argv`.

`PROGRAM_FLAGS` maps a program's name to its `ProgramFlags`: the flags whose value is a
password, the flags glued to one, the ``user:PASSWORD`` arguments, the words that announce
one further on, and how far each reaches. The actions at the top are what the reader does
to an item: keep it, hide it whole, or hide the part after a separator or prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from sonde.agent.scrub_commands import (
    ISQL_VALUED,
    LDAP_SWITCHES,
    LDAPPASSWD_SWITCHES,
    MC_VALUED,
    RABBITMQCTL_VALUED,
    REDIS_CLI_VALUED,
    VAULT_VALUED,
)
from sonde.agent.scrub_password_tools import OPENSSL_PASSWD_VALUED

# What happens to an item of a list: kept, hidden whole, hidden after the first colon (curl's
# user:SECRET), percent sign (smbclient's user%SECRET), comma (lftp's user,SECRET) or equals
# sign (a literal's KEY=SECRET), the
# password of an Oracle logon hidden (user/SECRET@db), or hidden after its first N characters
# (HIDE_AFTER_PREFIX + N: -pSECRET, -hpSECRET, /p:SECRET, ACL SETUSER's >SECRET).
KEEP, HIDE, HIDE_AFTER_COLON, HIDE_AFTER_PERCENT, HIDE_AFTER_COMMA, HIDE_LOGON = 0, 1, 3, 4, 5, 6
HIDE_AFTER_EQUALS = 7  # a literal's KEY=SECRET (kubectl create secret --from-literal KEY=SECRET)
HIDE_AFTER_PREFIX = 16
_NO_WORDS: Mapping[str, tuple[int, ...]] = MappingProxyType({})
_NO_MARKS: Mapping[str, tuple[str, ...]] = MappingProxyType({})
_NO_AFTER_WORD: Mapping[str, Mapping[str, tuple[int, ...]]] = MappingProxyType({})
_NO_SUBCOMMANDS: Mapping[str, ProgramFlags] = MappingProxyType({})


class ProgramFlags(NamedTuple):
    """A program's own password arguments, beyond the flags named like secrets (``--password``)."""

    separate: frozenset[str] = frozenset()  # the next item is the password: redis-cli -a PW
    # The password follows this prefix in the same item: -pPW, rar's -hpPW, xfreerdp's /p:PW
    # ("-" alone after it is no password: rar -p-).
    attached: tuple[str, ...] = ()
    user_password: frozenset[str] = frozenset()  # the next item, or the rest of this one, is user:PW
    user_password_action: int = HIDE_AFTER_COLON  # HIDE_AFTER_PERCENT: user%PW, _COMMA: user,PW
    # A bare word (any case, maybe after a dotted prefix: profile.dev.aws_secret_access_key)
    # and where its password is, counted in positional items after it (flags and the values of
    # `valued` flags skipped, up to a `stops` word): the furthest of these positions the list
    # reaches. rabbitmqctl add_user USER PW: (2,); redis-cli AUTH [USER] PW: (1, 2).
    words: Mapping[str, tuple[int, ...]] = _NO_WORDS
    stops: frozenset[str] = frozenset()  # a word ending a password's reach: MIGRATE ... AUTH PW KEYS k
    # Like `words`, for a word that counts only right after another, keyed by that one: mc admin
    # user add ALIAS KEY PW: {"add": {"user": (3,)}} (not admin group add).
    after_word: Mapping[str, Mapping[str, tuple[int, ...]]] = _NO_AFTER_WORD
    # A word after which each positional item starting with one of these prefixes holds a
    # password after it: redis-cli ACL SETUSER u >PW <PW: (">", "<"); "" is any item but a
    # NAME=VALUE pair: vault login TOKEN.
    marks: Mapping[str, tuple[str, ...]] = _NO_MARKS
    valued: frozenset[str] = frozenset()  # flags whose next item is their value, not a word: -h HOST
    password_at: int = 0  # the password is this positional item after the program's name: isql DSN USER PW
    # A short flag letter that, alone or in a run (-nbB), makes the last item the password: htpasswd -b
    last_with: str = ""
    # Oracle logons user/PW[@db]: the first logon-shaped positional item before a start script
    # (sqlplus u/PW @x.sql reports/out.csv), a userid=|target=|... item, or the item after a word
    # (rman target|catalog|auxiliary u/PW).
    logons: bool = False
    # Its options end at its first positional item, the program it runs: sshpass -p PW ssh -p 2222
    # (ssh's -p is a port), read from there as that program's (a known one's) or nobody's.
    options_end: bool = False
    # The letters of its flags taking no value that may come clustered before a password flag in
    # one item, read as that flag: ldapsearch -xw PW is -w PW, -ZZxwPW is -wPW (-xy FILE stays).
    switches: str = ""
    # Flags whose value is KEY=SECRET, the secret after the "=" (--from-literal=KEY=SECRET too).
    key_value: frozenset[str] = frozenset()
    # A word after which the program's arguments are read with other flags: kubectl's "secret"
    # (create secret generic NAME --from-literal=...; a configmap's literals are no secret).
    subcommands: Mapping[str, ProgramFlags] = _NO_SUBCOMMANDS
    # Every positional item (flags and the values of `valued` ones skipped) is a password, "="
    # in it too: openssl passwd's plaintexts (openssl passwd -1 PW1 PW2).
    every_positional: bool = False


_MYSQL = ProgramFlags(attached=("-p",))  # mysql's "-p PW" prompts; PW is then the database
_MONGO = ProgramFlags(separate=frozenset({"-p"}))
_LDAP = ProgramFlags(separate=frozenset({"-w"}), attached=("-w",), switches=LDAP_SWITCHES)
# ldappasswd -w BINDPW -a OLDPW -s NEWPW (-A, -S, -W prompt; -t, -T name files)
_LDAPPASSWD = ProgramFlags(
    separate=frozenset({"-w", "-a", "-s"}), attached=("-w", "-a", "-s"), switches=LDAPPASSWD_SWITCHES
)
_CAPITAL_P = ProgramFlags(separate=frozenset({"-P"}))  # zip -P PW; lowercase -p is something else
_LOWER_P = ProgramFlags(separate=frozenset({"-p"}))  # rdesktop -p PW ("-p -": from stdin)
_SAMBA = ProgramFlags(user_password=frozenset({"-U", "--user"}), user_password_action=HIDE_AFTER_PERCENT)
_ORACLE_LOGON_WORDS = dict.fromkeys(("target", "catalog", "auxiliary"), (1,))  # rman target u/PW
# the snmp tools' -A AUTHPASS, -X PRIVPASS, -c COMMUNITY (even the default "public": a community
# is a password); snmpd's and snmptrapd's -c is their config file
_SNMP = ProgramFlags(separate=frozenset({"-A", "-X", "-c"}), attached=("-A", "-X", "-c"))
_SNMP_TOOLS = (
    "snmpget", "snmpgetnext", "snmpwalk", "snmpbulkwalk", "snmpbulkget", "snmpset", "snmptrap", "snmpinform",
    "snmptable", "snmpdelta", "snmpdf", "snmpstatus", "snmptest", "snmpnetstat", "snmpusm", "snmpvacm",
)  # fmt: skip
_NMCLI_SECRETS = (
    "password", "psk", "leap-password", "private-key-password", "phase2-private-key-password", "pin",
    "wep-key0", "wep-key1", "wep-key2", "wep-key3",
)  # fmt: skip
# Every client of MySQL and MariaDB, and the backup tools, reads -pPW so.
_MYSQL_CLIENTS = (
    "mysql", "mysqldump", "mariadb", "mysqlcheck", "mysqlimport", "mysqlbinlog", "mysqlsh", "mysqlpump",
    "mysql_upgrade", "mysqlshow", "mysqlslap", "mysql_secure_installation", "mariadb-dump",
    "mariadb-check", "mariadb-import", "mariadb-binlog", "mariadb-upgrade", "mariadb-show",
    "mariadb-slap", "mariadb-backup", "mariabackup", "xtrabackup",
)  # fmt: skip
_REDIS_CLI = ProgramFlags(
    separate=frozenset({"-a"}),
    # AUTH [user] PW and HELLO 3 AUTH user PW; MIGRATE ... AUTH PW [KEYS k] | AUTH2 user PW;
    # CONFIG SET requirepass|masterauth PW
    words={"auth": (1, 2), "auth2": (2,), "requirepass": (1,), "masterauth": (1,)},
    stops=frozenset({"keys"}),
    marks={"setuser": (">", "<")},  # ACL SETUSER u on >PW <PW (a #hash stays)
    valued=frozenset(REDIS_CLI_VALUED),
)
# redis-benchmark's flags taking a value besides redis-cli's: -c CLIENTS, -P PIPELINE ...
_REDIS_BENCHMARK = _REDIS_CLI._replace(
    valued=frozenset({*REDIS_CLI_VALUED, "-c", "-P", "--threads", "--dbnum", "--precision", "--seed"})
)
_KUBECTL = ProgramFlags(subcommands={"secret": ProgramFlags(key_value=frozenset({"--from-literal"}))})
# docker/podman/buildah/nerdctl/skopeo/helm registry login -p PW|-pPW|-p=PW; az login's and az acr's -p
# alike (az deployment's -p takes its parameters: no password)
_LOGIN = ProgramFlags(separate=frozenset({"-p"}), attached=("-p=", "-p"))
PROGRAM_FLAGS: dict[str, ProgramFlags] = {
    **dict.fromkeys(_MYSQL_CLIENTS, _MYSQL),
    # mysqladmin password NEWPW
    **dict.fromkeys(("mysqladmin", "mariadb-admin"), _MYSQL._replace(words={"password": (1,)})),
    **dict.fromkeys(("redis-cli", "valkey-cli", "keydb-cli"), _REDIS_CLI),
    **dict.fromkeys(("redis-benchmark", "valkey-benchmark", "keydb-benchmark"), _REDIS_BENCHMARK),
    # sshpass [-f FILE|-d FD|-p PW|-e] [-P PROMPT] [-v] PROGRAM ARGS: its options end at PROGRAM
    "sshpass": ProgramFlags(
        separate=frozenset({"-p"}),
        attached=("-p",),
        valued=frozenset({"-f", "-d", "-P"}),
        options_end=True,
    ),
    **dict.fromkeys(
        (
            "mongo",
            "mongosh",
            "mongodump",
            "mongorestore",
            "mongoexport",
            "mongoimport",
            "mongostat",
            "mongotop",
        ),
        _MONGO,
    ),
    **dict.fromkeys(
        (
            "ldapsearch",
            "ldapmodify",
            "ldapadd",
            "ldapdelete",
            "ldapwhoami",
            "ldapcompare",
            "ldapmodrdn",
            "ldapexop",
        ),
        _LDAP,
    ),
    "ldappasswd": _LDAPPASSWD,
    "curl": ProgramFlags(
        separate=frozenset({"--oauth2-bearer"}),
        user_password=frozenset({"-u", "--user", "-U", "--proxy-user"}),
    ),
    "etcdctl": ProgramFlags(user_password=frozenset({"--user"})),
    "login": _LOGIN,
    "az": ProgramFlags(subcommands=dict.fromkeys(("login", "acr"), _LOGIN)),
    # the samba tools, net (net ads join -U admin%PW) among them
    **dict.fromkeys(("smbclient", "rpcclient", "smbcacls", "smbget", "smbtree", "net"), _SAMBA),
    **dict.fromkeys(("sqlplus", "sqlldr", "expdp", "impdp", "dgmgrl"), ProgramFlags(logons=True)),
    "rman": ProgramFlags(logons=True, words=_ORACLE_LOGON_WORDS),
    # add_user [--pre-hashed-password] USER PW|HASH
    "rabbitmqctl": ProgramFlags(
        words={"add_user": (2,), "change_password": (2,), "authenticate_user": (2,)},
        valued=frozenset(RABBITMQCTL_VALUED),
    ),
    # htpasswd -b[cmBdpsDv] [-C cost] FILE USER PW, -nb USER PW; mosquitto_passwd -b FILE USER PW
    **dict.fromkeys(("htpasswd", "mosquitto_passwd"), ProgramFlags(last_with="b")),
    **dict.fromkeys(("zip", "unzip", "mosquitto_pub", "mosquitto_sub", "mosquitto_rr"), _CAPITAL_P),
    **dict.fromkeys(("ipmitool", "sqlcmd", "bcp"), _CAPITAL_P),
    # 7z a -pPW (-p alone prompts); rar a -pPW|-hpPW (-p- is no password)
    **dict.fromkeys(("7z", "7za", "7zr", "7zz"), ProgramFlags(attached=("-p",))),
    **dict.fromkeys(("rar", "unrar"), ProgramFlags(attached=("-hp", "-p"))),
    "lftp": ProgramFlags(user_password=frozenset({"-u"}), user_password_action=HIDE_AFTER_COMMA),
    **dict.fromkeys(
        ("xfreerdp", "xfreerdp3", "wlfreerdp", "sdl-freerdp", "sdl-freerdp3"),
        ProgramFlags(attached=("/p:", "/password:", "/gp:")),
    ),
    **dict.fromkeys(("rdesktop", "ncftp", "ncftpget", "ncftpput", "ncftpls", "ncftpbatch"), _LOWER_P),
    # enc -k PW, -K HEXKEY (-kfile: a file); passwd [-6] [-salt SALT] PW... (each positional item
    # is hashed: a plaintext; -stdin, -in FILE read them elsewhere)
    "openssl": ProgramFlags(
        separate=frozenset({"-k", "-K"}),
        valued=frozenset(OPENSSL_PASSWD_VALUED),
        subcommands={"passwd": ProgramFlags(valued=frozenset(OPENSSL_PASSWD_VALUED), every_positional=True)},
    ),
    **dict.fromkeys(_SNMP_TOOLS, _SNMP),
    # unixODBC: isql DSN [USER [PW]]; Sybase/SAP ASE: isql -U USER -P PW|-PPW -S SERVER; sqsh
    # likewise (a flag after -P: an empty password)
    **dict.fromkeys(
        ("isql", "iusql"),
        ProgramFlags(
            separate=frozenset({"-P"}), attached=("-P",), valued=frozenset(ISQL_VALUED), password_at=3
        ),
    ),
    "sqsh": ProgramFlags(separate=frozenset({"-P"}), attached=("-P",)),
    # mc alias set NAME URL ACCESSKEY SECRETKEY; mc admin user add ALIAS ACCESSKEY SECRETKEY; the
    # older mc config host add ALIAS URL ACCESSKEY SECRETKEY [API]
    **dict.fromkeys(
        ("mc", "mcli"),
        ProgramFlags(
            words={"alias": (5,)},
            after_word={"add": {"user": (3,), "host": (4,)}},
            valued=frozenset(MC_VALUED),
        ),
    ),
    # vault login [flags] TOKEN (NAME=VALUE pairs for other methods: the text rules read them)
    "vault": ProgramFlags(marks={"login": ("",)}, valued=frozenset(VAULT_VALUED)),
    # nmcli dev wifi connect SSID password PW; nmcli con modify NAME wifi-sec.psk PW (802-1x.password ...)
    "nmcli": ProgramFlags(words=dict.fromkeys(_NMCLI_SECRETS, (1,))),
    # aws configure set [profile.NAME.]aws_secret_access_key PW; aws s3 cp ... --sse-c-key KEY
    "aws": ProgramFlags(
        separate=frozenset({"--sse-c-key", "--sse-c-copy-source-key"}),
        attached=("--sse-c-key=", "--sse-c-copy-source-key="),
        words=dict.fromkeys(("aws_secret_access_key", "aws_session_token"), (1,)),
    ),
    # ssh-keygen -P OLDPASSPHRASE -N NEWPASSPHRASE (-N "": none)
    "ssh-keygen": ProgramFlags(separate=frozenset({"-N", "-P"}), attached=("-N", "-P")),
    # wpa_passphrase SSID PASSPHRASE (without it: read from stdin)
    "wpa_passphrase": ProgramFlags(password_at=2),
    # rabbitmqadmin -u USER -p PW (-P is its port); cqlsh -u USER -p PW
    **dict.fromkeys(("rabbitmqadmin", "cqlsh"), _LOWER_P._replace(attached=("-p",))),
    # consul|nomad agent -encrypt=KEY (a gossip key)
    **dict.fromkeys(
        ("consul", "nomad"),
        ProgramFlags(separate=frozenset({"-encrypt", "--encrypt"}), attached=("-encrypt=", "--encrypt=")),
    ),
    # ngrok config add-authtoken TOKEN (ngrok 2: ngrok authtoken TOKEN), add-api-key KEY
    "ngrok": ProgramFlags(words=dict.fromkeys(("add-authtoken", "authtoken", "add-api-key"), (1,))),
    # frpc|frps -t TOKEN
    **dict.fromkeys(("frpc", "frps"), ProgramFlags(separate=frozenset({"-t"}), attached=("-t",))),
    # grafana-cli [flags] admin reset-admin-password PW (Grafana 10+: grafana cli ...; with
    # --password-from-stdin there is none)
    **dict.fromkeys(("grafana-cli", "grafana"), ProgramFlags(words={"reset-admin-password": (1,)})),
    # kubectl|oc create secret generic NAME --from-literal=KEY=SECRET
    **dict.fromkeys(("kubectl", "oc"), _KUBECTL),
}

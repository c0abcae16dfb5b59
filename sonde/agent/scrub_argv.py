"""Reading a list of strings as a command line (an argv): which items hold a password.

The scrubber (`sonde.agent.scrubber`) asks `argv_plan` of every list it walks and
hides what the plan says (`hide`); the text rules (`sonde.agent.scrub_programs`) cover
the same programs when a command line comes joined into one string.

In a list of strings, the item after a secret flag (``--password``,
``--requirepass``) is redacted, and so are the password arguments of known
programs (`sonde.agent.scrub_argv_programs`), from the item naming the program
on (so ``sudo mysql -pX`` and ``timeout 30 redis-cli -a X`` are covered; sshpass's
own options end at the program it runs, so ``sshpass -p X ssh -p 2222`` keeps the port):
flags (mysql's (every MySQL and MariaDB client's, mariabackup's and xtrabackup's), sshpass's,
7z's and rar's ``-pSECRET``, rar's ``-hpSECRET``,
xfreerdp's ``/p:SECRET``, ``redis-cli -a``, ``sshpass -p``, the mongo tools' ``-p``,
the ldap tools' ``-w`` (ldappasswd's ``-a OLD`` and ``-s NEW`` too; after switches clustered
with it, ``-xw``, ``-ZZxwPW``), ``docker login -p`` (``-p=``, ``az login``'s and ``az acr``'s too),
``rdesktop``/``ncftp -p``, ``openssl -k``, the snmp tools' ``-A``/``-X``/``-c`` (the
community, ``public`` too), ``zip``/``unzip``/``ipmitool``/``sqlcmd``/``bcp``, Sybase
``isql``, ``sqsh`` and the mosquitto clients' ``-P``, ``ssh-keygen -P OLD -N NEW``,
``curl --oauth2-bearer``, ``aws --sse-c-key``, ``rabbitmqadmin``'s and ``cqlsh``'s ``-p``,
``consul``'s and ``nomad``'s ``-encrypt``, ``frpc -t``, valkey-cli's and keydb-cli's as
redis-cli's, the
password half of curl's and etcdctl's ``user:SECRET``, lftp's ``-u user,SECRET`` and the
samba tools' (net's too) ``-U user%SECRET``); the password an item announces further on
(``htpasswd -b file user SECRET``, ``isql DSN user SECRET``, redis-cli's ``AUTH [user]
SECRET`` (``MIGRATE ... AUTH SECRET KEYS k``, ``AUTH2 user SECRET``), ``CONFIG SET
requirepass SECRET`` and every ``>SECRET`` after ``ACL SETUSER``, ``rabbitmqctl add_user bob
SECRET``, ``nmcli ... password SECRET``, ``aws configure set aws_secret_access_key SECRET``,
``mysqladmin password SECRET`` (``mariadb-admin``'s too), ``wpa_passphrase SSID SECRET``,
``ngrok config add-authtoken SECRET``, ``kubectl create secret ... --from-literal KEY=SECRET``
(the value after the key), ``mc alias set NAME URL KEY SECRET``, ``mc admin user add
ALIAS KEY SECRET``, ``mc config host add ALIAS URL KEY SECRET``, ``vault login TOKEN``,
``grafana-cli admin reset-admin-password SECRET``); every
plaintext ``openssl passwd`` hashes (``openssl passwd -1 PW1 PW2``); and the password of an
Oracle logon (``sqlplus scott/SECRET@db``, ``userid=scott/SECRET``, ``rman target u/SECRET
catalog u/SECRET``; a path such as a script's argument ``reports/out.csv`` is not one). Such
words are only words of their program: ``["user", "password", "host"]`` is left alone; nor
is a value a flag takes a word (``redis-cli -h auth ping``), and a flag named like a secret
that takes no value (``--pre-hashed-password``) leaves the next item alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sonde.agent.scrub_argv_programs import (
    HIDE,
    HIDE_AFTER_COLON,
    HIDE_AFTER_COMMA,
    HIDE_AFTER_EQUALS,
    HIDE_AFTER_PERCENT,
    HIDE_AFTER_PREFIX,
    HIDE_LOGON,
    KEEP,
    PROGRAM_FLAGS,
    ProgramFlags,
)
from sonde.agent.scrub_rules import SWITCHES
from sonde.agent.secret_names import is_secret_name
from sonde.protocol.names import REDACTED

_ARGV_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
# An Oracle logon: [userid=|target=]user/PASSWORD[@db]; the password ends at "@" or a space
# unless double-quoted (scott/"p@ss word"@db). A path is not one: reports/out.csv/x, ./x, a.d/x.
_LOGON = re.compile(
    r"(?P<key>(?i:userid|target|catalog|auxiliary)=)?[^\s/@\"'():=.]{1,128}/"
    r"(?P<password>\"[^\"]+\"|[^\s@\"'/]*)(?![^\s@])"
)
_VALUE = -1  # what a flag asks of the next item: it is the flag's value (-h auth), read as nothing else
_USER_PASSWORD_SEPARATORS = {
    HIDE_AFTER_COLON: ":",
    HIDE_AFTER_PERCENT: "%",
    HIDE_AFTER_COMMA: ",",
    HIDE_AFTER_EQUALS: "=",
}
LOOK_AHEAD_ITEMS = 64  # how far a program's name or word looks for the password it announces


def already_hidden(value: Any) -> bool:
    """Nothing to hide: null, empty, already redacted, or masked with asterisks."""
    if value is None or value == REDACTED:
        return True
    if isinstance(value, str | list | dict):
        return not value or (isinstance(value, str) and set(value) == {"*"})
    return False


@functools.lru_cache(maxsize=4096)
def _is_secret_flag(item: str) -> bool:
    name = item.lstrip("-")
    return bool(_ARGV_FLAG.fullmatch(item)) and is_secret_name(name) and name.lower() not in SWITCHES


def argv_plan(items: Sequence[Any]) -> list[int] | None:
    """What to hide in a list read as an argv (None: nothing): the value after a secret
    flag (``--password x``), and what `PROGRAM_FLAGS` says of the program's own arguments.

    A known program's flags and words apply from the item naming it on, wherever it is, so a
    wrapped command (``sudo -u app mysql -pX``, ``timeout 30 redis-cli -a X``, ``docker exec db
    mysql -pX``) is read as the program's own. A flag carrying its password (``-pX``) is
    read as that before as a flag named like a secret (``-pAdminPass`` is mysql's password,
    not a ``--...pass`` flag whose value comes next). A password further on that the program's
    name, a word or a flag announces (``isql DSN user PW``, ``AUTH user PW``, ``htpasswd -b f
    user PW``) is planned when that is read, and its item is then read as nothing else; so is
    the value of a flag that takes one (``redis-cli -h auth ping``). Until a list names a known
    program, an item costs a few comparisons and one dict lookup.
    """
    if not items or not isinstance(items[0], str):
        return None  # not an argv
    plan = None
    flags = _NO_FLAGS
    pending = KEEP  # what the flag before asks of this item
    marks: tuple[str, ...] = ()  # prefixes of the items holding a password from here on (ACL SETUSER)
    for index, item in enumerate(items):
        if not isinstance(item, str) or (plan and plan[index]):
            pending = KEEP  # not an argument, or a password announced before: read as nothing else
            continue
        action = KEEP
        ahead: Sequence[int] = ()  # the indexes of the passwords further on that this item announces
        if item == "--" and flags.every_positional:  # openssl passwd -- -PW: the rest are plaintexts
            ahead = range(index + 1, len(items))
        elif item[:1] == "-":
            flag, clustered = _unclustered(item, flags)
            action = _attached_value(flag, flags)
            if action >= HIDE_AFTER_PREFIX:
                action += clustered  # the password starts that much further in the item itself
            pending = _flag_asks(flag, flags) if action == KEEP else KEEP
            if flags.last_with and action == KEEP and _is_short_flag_with(item, flags.last_with):
                ahead = (len(items) - 1,)
        elif pending != KEEP:
            action = pending if pending != _VALUE and _hides(item, pending) else KEEP
            pending = KEEP
        elif flags is _NO_FLAGS:
            program = PROGRAM_FLAGS.get(item.rsplit("/", 1)[-1])
            if program is not None:
                flags, ahead = program, _named_program(items, index, program)
        else:
            flags, action, ahead, marks = _program_argument(items, index, flags, marks)
        if ahead:
            plan = _plan_ahead(plan, items, ahead, HIDE_LOGON if flags.logons else HIDE)
        if action != KEEP:
            plan = plan or [KEEP] * len(items)
            plan[index] = action
    return plan


_NO_FLAGS = ProgramFlags()


def _plan_ahead(
    plan: list[int] | None, items: Sequence[Any], ahead: Sequence[int], action: int
) -> list[int] | None:
    """``plan`` with ``action`` planned for each of the items at ``ahead`` it finds something in."""
    for at in ahead:
        if _hides(items[at], action):
            plan = plan or [KEEP] * len(items)
            plan[at] = action
    return plan


def _named_program(items: Sequence[Any], index: int, program: ProgramFlags) -> Sequence[int]:
    """The passwords that naming ``program`` at ``index`` announces: its Oracle logon, or the
    positional item it takes the password at (``isql DSN USER PW``)."""
    if program.logons:
        return _first_logon(items, index)
    if program.password_at:
        return _announced(items, index, program, (program.password_at,))
    return ()


def _program_argument(
    items: Sequence[Any], index: int, flags: ProgramFlags, marks: tuple[str, ...]
) -> tuple[ProgramFlags, int, Sequence[int], tuple[str, ...]]:
    """Read the positional argument at ``index`` of a known program: a password a word before
    marked (``>PW``), one with its prefix (``/p:PW``), a keyed logon (``userid=scott/PW``), a
    word announcing a password further on (``AUTH PW``) or another program (``sudo mysql``).

    Returns the flags from here on, what to hide in this item, the indexes of the passwords it
    announces, and the marks from here on.
    """
    item = items[index]
    action = _marked(item, marks) if marks else KEEP
    if action == KEEP and flags.every_positional:
        action = HIDE if _hides(item, HIDE) else KEEP
    if action == KEEP and flags.attached:
        action = _attached_value(item, flags)
    if action == KEEP and flags.logons:
        logon = _LOGON.match(item)
        action = HIDE_LOGON if logon and logon["key"] and _hides(item, HIDE_LOGON) else KEEP
    if action != KEEP:
        return flags, action, (), marks
    subcommand = flags.subcommands.get(item.lower()) if flags.subcommands else None
    if subcommand is not None:
        return subcommand, KEEP, (), ()
    word = item.rsplit(".", 1)[-1].lower() if flags.words or flags.marks or flags.after_word else ""
    positions = flags.words.get(word) or _after_its_word(items, index, flags.after_word.get(word))
    if positions is not None:
        return flags, KEEP, _announced(items, index, flags, positions), marks
    if word in flags.marks:
        return flags, KEEP, (), flags.marks[word]
    program = PROGRAM_FLAGS.get(item.rsplit("/", 1)[-1])
    if program is not None:
        return program, KEEP, _named_program(items, index, program), ()
    if flags.options_end:  # the program it runs, not a known one
        return _NO_FLAGS, KEEP, (), ()
    return flags, KEEP, (), marks


def _after_its_word(
    items: Sequence[Any], index: int, after: Mapping[str, tuple[int, ...]] | None
) -> tuple[int, ...] | None:
    """The positions of the word at ``index`` given the word before it (`ProgramFlags.after_word`)."""
    previous = items[index - 1] if after and index else None
    return after.get(previous.lower()) if after and isinstance(previous, str) else None


def _positional_after(items: Sequence[Any], index: int, flags: ProgramFlags) -> Iterator[int]:
    """The indexes of the positional items after ``index`` (within `LOOK_AHEAD_ITEMS`): flags,
    and the values of the `valued` ones, skipped; up to one of the program's `stops` words."""
    skip = False
    for at in range(index + 1, min(len(items), index + 1 + LOOK_AHEAD_ITEMS)):
        item = items[at]
        if skip:
            skip = False
        elif isinstance(item, str) and item[:1] == "-":
            skip = item in flags.valued
        elif isinstance(item, str) and flags.stops and item.lower() in flags.stops:
            return
        else:
            yield at


def _announced(
    items: Sequence[Any], index: int, flags: ProgramFlags, positions: tuple[int, ...]
) -> Sequence[int]:
    """The password the item at ``index`` announces at ``positions`` (the furthest one reached)."""
    found: list[int] = []
    for at in _positional_after(items, index, flags):
        found.append(at)
        if len(found) == positions[-1]:
            break
    there = [found[position - 1] for position in positions if position <= len(found)]
    return there[-1:]


def _first_logon(items: Sequence[Any], index: int) -> Sequence[int]:
    """The first logon-shaped positional item after ``index``, before a start script (``@x.sql``:
    what follows are its arguments) or another program's name."""
    for at in _positional_after(items, index, _NO_FLAGS):
        item = items[at]
        if isinstance(item, str) and (item[:1] == "@" or item in PROGRAM_FLAGS):
            break
        if isinstance(item, str) and _LOGON.match(item):
            return (at,)  # planned when not hidden already: scott/[REDACTED] is still the logon
    return ()


def _marked(item: str, marks: tuple[str, ...]) -> int:
    """How to hide the password after one of ``marks`` in ``item`` (``>PW``; "": all of a bare item)."""
    for prefix in marks:
        if item.startswith(prefix) and (prefix or "=" not in item) and _hides(item[len(prefix) :], HIDE):
            return HIDE_AFTER_PREFIX + len(prefix)
    return KEEP


def _is_short_flag_with(item: str, letter: str) -> bool:
    """Whether ``item`` is a short flag, or a run of them, holding ``letter`` (htpasswd's -b, -nbB)."""
    return letter in item and item[1:].isalpha()


def _unclustered(item: str, flags: ProgramFlags) -> tuple[str, int]:
    """``item`` without the switches clustered before a password flag (``-ZZxw`` -> ``-w``,
    ``-xwPW`` -> ``-wPW``; `ProgramFlags.switches`), and how many letters went; ``item`` itself
    (and 0) when it is no such cluster."""
    if not flags.switches or item[:2] == "--":
        return item, 0
    rest = item[1:].lstrip(flags.switches)
    flag = "-" + rest
    if len(rest) == len(item) - 1 or not (flag[:2] in flags.separate or flag.startswith(flags.attached)):
        return item, 0
    return flag, len(item) - len(flag)


def _flag_asks(flag: str, flags: ProgramFlags) -> int:
    """What ``flag`` asks of the item after it."""
    if flag in flags.separate or _is_secret_flag(flag):
        return HIDE
    if flag in flags.user_password:
        return flags.user_password_action
    if flag in flags.key_value:
        return HIDE_AFTER_EQUALS
    if flag in flags.valued:
        return _VALUE
    return KEEP


def _attached_value(item: str, flags: ProgramFlags) -> int:
    """How to hide a password inside the flag item itself (``-pPW``, ``/p:PW``, ``-ubob:PW``,
    ``--user=bob:PW``, ``--from-literal=KEY=PW``)."""
    if flags.key_value:
        flag, equals, literal = item.partition("=")
        if equals and flag in flags.key_value:
            key, found, secret = literal.partition("=")
            hidden = found and not already_hidden(secret)
            return HIDE_AFTER_PREFIX + len(flag) + len(key) + 2 if hidden else KEEP
    if item.startswith(flags.attached):
        prefix = max((prefix for prefix in flags.attached if item.startswith(prefix)), key=len)
        value = item[len(prefix) :]
        if value:
            return HIDE_AFTER_PREFIX + len(prefix) if value != "-" and _hides(value, HIDE) else KEEP
    if item.split("=", 1)[0] in flags.user_password or item[:2] in flags.user_password:
        action = flags.user_password_action
        return action if _hides(item, action) else KEEP
    return KEEP


def _hides(item: Any, action: int) -> bool:
    """Whether ``action`` finds something to hide in ``item``."""
    if not isinstance(item, str):
        return False
    if action == HIDE_LOGON:
        logon = _LOGON.match(item)
        return logon is not None and not already_hidden(logon["password"])
    separator = _USER_PASSWORD_SEPARATORS.get(action)
    if separator is not None:
        _, found, password = item.partition(separator)
        return bool(found) and not already_hidden(password)
    return not already_hidden(item)


def hide(item: str, action: int) -> str:
    """``item`` with what ``action`` hides replaced by ``[REDACTED]``."""
    if action >= HIDE_AFTER_PREFIX:
        return item[: action - HIDE_AFTER_PREFIX] + REDACTED
    if action == HIDE_LOGON:
        logon = _LOGON.match(item)
        assert logon is not None  # planned only for a logon
        return item[: logon.start("password")] + REDACTED + item[logon.end("password") :]
    separator = _USER_PASSWORD_SEPARATORS.get(action)
    if separator is not None:
        return item.partition(separator)[0] + separator + REDACTED
    return REDACTED

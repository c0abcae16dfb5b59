"""The agent's scrubber: nothing secret leaves the machine.

Every probe result and every error message goes through `Scrubber.scrub`
before the agent sends it (the daemon's `ProbeRunner`, `sonde serve --json`).
It walks the JSON-like value and returns a scrubbed copy (the value itself
when nothing was redacted) plus the number of redactions, which the agent
reports as ``meta.redactions``:

- a dict field whose *name* says secret (`is_secret_name`: ``password``,
  ``apiKey``, ``X-Auth-Token``, ... but not ``keyspace_hits`` or
  ``password_policy``) has its whole value, whatever its type, replaced by
  ``[REDACTED]``; ``null``, ``""`` and empty containers are left alone;
- every string (values and keys) is scanned by the text rules of
  `sonde.agent.scrub_rules` (key blocks, cloud and vendor tokens, JWTs,
  bearer/basic credentials, URL and connection-string passwords,
  ``password=``-style assignments), then by the operator's own patterns;
- in a list of strings (an argv), the item after a secret flag
  (``--password``, ``--requirepass``) is redacted, and so are the password
  arguments of known programs (`ProgramFlags`), from the item naming the program
  on (so ``sudo mysql -pX`` and ``timeout 30 redis-cli -a X`` are covered):
  flags (mysql's, sshpass's and 7z's ``-pSECRET``, ``redis-cli -a``, ``sshpass -p``,
  the mongo tools' ``-p``, the ldap tools' ``-w``, ``docker login -p``, ``zip``/
  ``unzip``/``ipmitool``/``sqlcmd`` and the mosquitto clients' ``-P``, the password
  half of curl's and etcdctl's ``user:SECRET`` and smbclient's ``-U user%SECRET``);
  the password an item announces further on (``htpasswd -b file user SECRET``,
  redis-cli's ``AUTH [user] SECRET`` and ``CONFIG SET requirepass SECRET``,
  ``rabbitmqctl add_user bob SECRET``, ``nmcli ... password SECRET``, ``aws configure
  set aws_secret_access_key SECRET``, ``mysqladmin password SECRET``); and the
  password of an Oracle logon (``sqlplus scott/SECRET@db``, ``userid=scott/SECRET``).
  Such words are only words of their program: ``["user", "password", "host"]`` is
  left alone.

Operator patterns (``scrubPatterns`` in the agent config) are Python regular
expressions; a match is replaced whole, or only its named group ``secret`` when
the pattern has one. Scrubbing is idempotent: a second pass finds nothing.

How a scrub runs (`_Walk`): a first pass collects the strings of the value
in order and counts the redactions the structure decides (secret-named fields,
argv values); all strings are then scanned as one NUL-joined text. Only when
something is redacted does a second pass build the copy, taking the scrubbed
strings in the same order. A 200 KiB result takes a few milliseconds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from sonde.agent.config import AgentConfig
from sonde.agent.scrub_rules import REDACTED, SEPARATOR, compile_operator_pattern, scrub_text
from sonde.agent.secret_names import is_secret_name

MIN_BUILTIN_CHARS = 4  # the shortest built-in shape is "pw=x"
KEY_CACHE_ENTRIES = 4096  # dict keys remembered (keys repeat across list items)
_ARGV_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
# An Oracle logon: [userid=|target=]user/PASSWORD[@db]; the password ends at "@" or a space
# unless double-quoted (scott/"p@ss word"@db).
_LOGON = re.compile(
    r"(?i:(?:userid|target|catalog|auxiliary)=)?[^\s/@\"'():=]{1,128}/(?P<password>\"[^\"]+\"|[^\s@\"']*)"
)
_SCALARS = frozenset({int, float, bool, type(None)})
# What happens to an item of a list: kept, hidden whole, hidden after its two-character
# flag (-pSECRET), hidden after the first colon (curl's user:SECRET) or percent sign
# (smbclient's user%SECRET), or the password of an Oracle logon hidden (user/SECRET@db).
_KEEP, _HIDE, _HIDE_ATTACHED, _HIDE_AFTER_COLON, _HIDE_AFTER_PERCENT, _HIDE_LOGON = 0, 1, 2, 3, 4, 5
_USER_PASSWORD_SEPARATORS = {_HIDE_AFTER_COLON: ":", _HIDE_AFTER_PERCENT: "%"}
_NO_WORDS: Mapping[str, tuple[int, ...]] = MappingProxyType({})


class ProgramFlags(NamedTuple):
    """A program's own password arguments, beyond the flags named like secrets (``--password``)."""

    separate: frozenset[str] = frozenset()  # the next item is the password: redis-cli -a PW
    attached: tuple[str, ...] = ()  # the password follows the flag in the same item: -pPW
    user_password: frozenset[str] = frozenset()  # the next item, or the rest of this one, is user:PW
    user_password_action: int = _HIDE_AFTER_COLON  # _HIDE_AFTER_PERCENT: user%PW
    # A bare word (any case, maybe after a dotted prefix: profile.dev.aws_secret_access_key)
    # and where its password is, counted in items after it: the furthest of these positions
    # the list reaches. rabbitmqctl add_user USER PW: (2,); redis-cli AUTH [USER] PW: (1, 2).
    words: Mapping[str, tuple[int, ...]] = _NO_WORDS
    # A short flag letter that, alone or in a run (-nbB), makes the last item the password: htpasswd -b
    last_with: str = ""
    logons: bool = False  # a positional item user/PW[@db] (or userid=user/PW) is a logon: sqlplus


_MYSQL = ProgramFlags(attached=("-p",))  # mysql's "-p PW" prompts; PW is then the database
_MONGO = ProgramFlags(separate=frozenset({"-p"}))
_LDAP = ProgramFlags(separate=frozenset({"-w"}), attached=("-w",))
_CAPITAL_P = ProgramFlags(separate=frozenset({"-P"}))  # zip -P PW; lowercase -p is something else
_NMCLI_SECRETS = (
    "password", "psk", "leap-password", "private-key-password", "phase2-private-key-password", "pin",
    "wep-key0", "wep-key1", "wep-key2", "wep-key3",
)  # fmt: skip
PROGRAM_FLAGS: dict[str, ProgramFlags] = {
    **dict.fromkeys(("mysql", "mysqldump", "mariadb", "mysqlcheck", "mysqlimport"), _MYSQL),
    "mysqladmin": _MYSQL._replace(words={"password": (1,)}),  # mysqladmin password NEWPW
    "redis-cli": ProgramFlags(
        separate=frozenset({"-a"}),
        # AUTH [user] PW and HELLO 3 AUTH user PW; CONFIG SET requirepass|masterauth PW
        words={"auth": (1, 2), "requirepass": (1,), "masterauth": (1,)},
    ),
    "sshpass": ProgramFlags(separate=frozenset({"-p"}), attached=("-p",)),
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
            "ldappasswd",
            "ldapcompare",
            "ldapmodrdn",
            "ldapexop",
        ),
        _LDAP,
    ),
    "curl": ProgramFlags(user_password=frozenset({"-u", "--user", "-U", "--proxy-user"})),
    "etcdctl": ProgramFlags(user_password=frozenset({"--user"})),
    # docker/podman/buildah/nerdctl/skopeo/helm registry login -p PW
    "login": ProgramFlags(separate=frozenset({"-p"})),
    **dict.fromkeys(
        ("smbclient", "rpcclient", "smbcacls", "smbget", "smbtree"),
        ProgramFlags(user_password=frozenset({"-U", "--user"}), user_password_action=_HIDE_AFTER_PERCENT),
    ),
    **dict.fromkeys(("sqlplus", "sqlldr", "expdp", "impdp", "rman", "dgmgrl"), ProgramFlags(logons=True)),
    "rabbitmqctl": ProgramFlags(words={"add_user": (2,), "change_password": (2,), "authenticate_user": (2,)}),
    # htpasswd -b[cmBdpsDv] [-C cost] FILE USER PW, -nb USER PW; mosquitto_passwd -b FILE USER PW
    **dict.fromkeys(("htpasswd", "mosquitto_passwd"), ProgramFlags(last_with="b")),
    **dict.fromkeys(("zip", "unzip", "mosquitto_pub", "mosquitto_sub", "mosquitto_rr"), _CAPITAL_P),
    **dict.fromkeys(("ipmitool", "sqlcmd"), _CAPITAL_P),
    # 7z a -pPW (-p alone prompts)
    **dict.fromkeys(("7z", "7za", "7zr", "7zz"), ProgramFlags(attached=("-p",))),
    # nmcli dev wifi connect SSID password PW; nmcli con modify NAME wifi-sec.psk PW (802-1x.password ...)
    "nmcli": ProgramFlags(words=dict.fromkeys(_NMCLI_SECRETS, (1,))),
    # aws configure set [profile.NAME.]aws_secret_access_key PW
    "aws": ProgramFlags(words=dict.fromkeys(("aws_secret_access_key", "aws_session_token"), (1,))),
}


class KeyFacts(NamedTuple):
    """A dict key: scrubbed, its redaction count, and whether it names a secret."""

    scrubbed: str
    redactions: int
    secret: bool


class Scrubber:
    """The built-in rules plus ``operator_patterns``. Build with `from_config`.

    Raises `ValueError` naming the pattern when one does not compile or matches
    the empty string.
    """

    def __init__(self, operator_patterns: Sequence[str] = ()) -> None:
        self.operator_patterns = tuple(operator_patterns)
        self._compiled = tuple(
            compile_operator_pattern(index, pattern) for index, pattern in enumerate(self.operator_patterns)
        )
        self._keys: dict[str, KeyFacts] = {}
        self._plain_keys: set[str] = set()  # keys known to hold nothing secret, for the fast path

    @classmethod
    def from_config(cls, config: AgentConfig | None) -> Scrubber:
        """The scrubber for this agent: built-ins plus ``config.scrub_patterns`` (none without a config)."""
        return cls(config.scrub_patterns if config is not None else ())

    def scrub(self, value: Any) -> tuple[Any, int]:
        """``value`` (dicts, lists, strings, numbers) with its secrets redacted, and how many there were.

        Returns ``value`` itself when nothing was redacted, else a copy.
        """
        walk = _Walk(self)
        walk.collect(value)
        texts, count = self.scrub_texts(walk.texts)
        if not walk.count and not count:
            return value, 0
        return walk.rebuild(value, iter(texts)), walk.count + count

    def scrub_result(self, result: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """`scrub` for a probe result (a JSON object): the scrub function `ProbeRunner` takes."""
        scrubbed, count = self.scrub(result)
        return scrubbed, count

    def scrub_text(self, text: str) -> tuple[str, int]:
        """`scrub` for one string (an error message)."""
        [scrubbed], count = self.scrub_texts([text])
        return scrubbed, count

    def redacted(self, text: str) -> str:
        """``text`` as it would be sent (the probes' `ProbeContext.redact`)."""
        return self.scrub_text(text)[0]

    def scrub_texts(self, texts: list[str]) -> tuple[list[str], int]:
        """Each of ``texts`` scrubbed, and the number of redactions; ``texts`` itself when none."""
        joined = SEPARATOR.join(texts)
        if joined.count(SEPARATOR) == len(texts) - 1:  # no NUL inside a text: scan them as one
            scrubbed_text, count = scrub_text(joined) if len(joined) >= MIN_BUILTIN_CHARS else (joined, 0)
            scrubbed = scrubbed_text.split(SEPARATOR) if count else texts
        else:
            pairs = [scrub_text(text) for text in texts]
            scrubbed, count = [text for text, _ in pairs], sum(n for _, n in pairs)
        if self._compiled:
            pairs = [self._operator_scrub(text) for text in scrubbed]
            scrubbed, count = [text for text, _ in pairs], count + sum(n for _, n in pairs)
        return (scrubbed, count) if count else (texts, 0)

    def key_facts(self, key: str) -> KeyFacts:
        """`KeyFacts` of a dict key, remembered (a key with nothing to redact joins `_plain_keys`)."""
        facts = self._keys.get(key)
        if facts is None:
            scrubbed, count = self.scrub_text(key)
            facts = KeyFacts(scrubbed, count, is_secret_name(key))
            if len(self._keys) >= KEY_CACHE_ENTRIES:
                self._keys.clear()
                self._plain_keys.clear()
            self._keys[key] = facts
            if not count and not facts.secret:
                self._plain_keys.add(key)
        return facts

    def _operator_scrub(self, text: str) -> tuple[str, int]:
        count = 0

        def redact(match: re.Match[str]) -> str:
            nonlocal count
            group = "secret" if "secret" in match.re.groupindex and match["secret"] is not None else 0
            start, end = match.span(group)
            if match.string[start:end] == REDACTED:
                return match[0]
            count += 1
            origin = match.start()
            return match[0][: start - origin] + REDACTED + match[0][end - origin :]

        for pattern in self._compiled:
            text = pattern.sub(redact, text)
        return text, count


def _already_hidden(value: Any) -> bool:
    """Nothing to hide: null, empty, already redacted, or masked with asterisks."""
    if value is None or value == REDACTED:
        return True
    if isinstance(value, str | list | dict):
        return not value or (isinstance(value, str) and set(value) == {"*"})
    return False


@functools.lru_cache(maxsize=4096)
def _is_secret_flag(item: str) -> bool:
    return bool(_ARGV_FLAG.fullmatch(item)) and is_secret_name(item.lstrip("-"))


def _argv_plan(items: Sequence[Any]) -> list[int] | None:
    """What to hide in a list read as an argv (None: nothing): the value after a secret
    flag (``--password x``), and what `PROGRAM_FLAGS` says of the program's own arguments.

    A known program's flags and words apply from the item naming it on, wherever it is, so a
    wrapped command (``sudo -u app mysql -pX``, ``timeout 30 redis-cli -a X``, ``docker exec db
    mysql -pX``) is read as the program's own. A flag carrying its password (``-pX``) is
    read as that before as a flag named like a secret (``-pAdminPass`` is mysql's password,
    not a ``--...pass`` flag whose value comes next). A password further on that a word or a
    flag announces (``AUTH user PW``, ``htpasswd -b f user PW``) is planned when that is
    read, and its item is then read as nothing else. Until a list names a known program,
    an item costs a few comparisons and one dict lookup.
    """
    if not items or not isinstance(items[0], str):
        return None  # not an argv
    plan = None
    flags = _NO_FLAGS
    pending = _KEEP  # what the flag before asks of this item
    for index, item in enumerate(items):
        if not isinstance(item, str) or (plan and plan[index]):
            pending = _KEEP  # not an argument, or a password announced before: read as nothing else
            continue
        action = ahead = _KEEP  # ahead: the index of a password further on that this item announces
        if item[:1] == "-":
            action = _attached_value(item, flags)
            pending = _flag_asks(item, flags) if action == _KEEP else _KEEP
            if flags.last_with and action == _KEEP and _is_short_flag_with(item, flags.last_with):
                ahead = len(items) - 1
        elif pending != _KEEP:
            action = pending if _hides(item, pending) else _KEEP
            pending = _KEEP
        elif flags is _NO_FLAGS:
            flags = PROGRAM_FLAGS.get(item.rsplit("/", 1)[-1], flags)
        else:
            flags, action, ahead = _program_argument(items, index, flags)
        if ahead > index and _hides(items[ahead], _HIDE):
            plan = plan or [_KEEP] * len(items)
            plan[ahead] = _HIDE
        if action != _KEEP:
            plan = plan or [_KEEP] * len(items)
            plan[index] = action
    return plan


_NO_FLAGS = ProgramFlags()


def _program_argument(items: Sequence[Any], index: int, flags: ProgramFlags) -> tuple[ProgramFlags, int, int]:
    """Read the argument at ``index`` of a known program: a logon (``scott/PW@db``), another
    program (``sudo mysql``) or a word announcing a password further on (``AUTH PW``).

    Returns the flags from here on, what to hide in this item, and the index of the announced
    password (0: none).
    """
    item = items[index]
    if flags.logons and _hides(item, _HIDE_LOGON):
        return flags, _HIDE_LOGON, 0
    program = PROGRAM_FLAGS.get(item.rsplit("/", 1)[-1])
    if program is not None:
        return program, _KEEP, 0
    positions = flags.words.get(item.rsplit(".", 1)[-1].lower()) if flags.words else None
    if positions is None:
        return flags, _KEEP, 0
    there = [index + at for at in positions if index + at < len(items)]
    return flags, _KEEP, there[-1] if there else 0


def _is_short_flag_with(item: str, letter: str) -> bool:
    """Whether ``item`` is a short flag, or a run of them, holding ``letter`` (htpasswd's -b, -nbB)."""
    return letter in item and item[1:].isalpha()


def _flag_asks(flag: str, flags: ProgramFlags) -> int:
    """What ``flag`` asks of the item after it."""
    if flag in flags.separate or _is_secret_flag(flag):
        return _HIDE
    if flag in flags.user_password:
        return flags.user_password_action
    return _KEEP


def _attached_value(item: str, flags: ProgramFlags) -> int:
    """How to hide a password inside the flag item itself (``-pPW``, ``-ubob:PW``, ``--user=bob:PW``)."""
    if item.startswith(flags.attached) and len(item) > 2:
        return _HIDE_ATTACHED if _hides(item[2:], _HIDE) else _KEEP
    if item.split("=", 1)[0] in flags.user_password or item[:2] in flags.user_password:
        action = flags.user_password_action
        return action if _hides(item, action) else _KEEP
    return _KEEP


def _hides(item: Any, action: int) -> bool:
    """Whether ``action`` finds something to hide in ``item``."""
    if not isinstance(item, str):
        return False
    if action == _HIDE_LOGON:
        logon = _LOGON.match(item)
        return logon is not None and not _already_hidden(logon["password"])
    separator = _USER_PASSWORD_SEPARATORS.get(action)
    if separator is not None:
        _, found, password = item.partition(separator)
        return bool(found) and not _already_hidden(password)
    return not _already_hidden(item)


def _hide(item: str, action: int) -> str:
    """``item`` with what ``action`` hides replaced by ``[REDACTED]``."""
    if action == _HIDE_ATTACHED:
        return item[:2] + REDACTED
    if action == _HIDE_LOGON:
        logon = _LOGON.match(item)
        assert logon is not None  # planned only for a logon
        return item[: logon.start("password")] + REDACTED + item[logon.end("password") :]
    separator = _USER_PASSWORD_SEPARATORS.get(action)
    if separator is not None:
        return item.partition(separator)[0] + separator + REDACTED
    return REDACTED


class _Walk:
    """One scrub: `collect` the strings and count structural redactions, then `rebuild`.

    `collect` is the hot path (it runs on every result), so it keeps lookups local.
    """

    def __init__(self, scrubber: Scrubber) -> None:
        self.plain_keys = scrubber._plain_keys
        self.key_facts = scrubber.key_facts
        self.count = 0
        self.texts: list[str] = []

    def collect(self, value: Any) -> None:
        """Append the strings that stay (in walk order) to `texts`; count what structure hides."""
        if isinstance(value, str):
            self.texts.append(value)
        elif isinstance(value, dict):
            self._collect_dict(value)
        elif isinstance(value, list | tuple):
            self._collect_list(value)

    def _collect_dict(self, value: dict[Any, Any]) -> None:
        plain_keys, append, collect = self.plain_keys, self.texts.append, self.collect
        for key, item in value.items():
            if key not in plain_keys and self._hides_field(key, item):
                continue
            kind = type(item)
            if kind is str:
                append(item)
            elif kind not in _SCALARS:
                collect(item)

    def _hides_field(self, key: Any, item: Any) -> bool:
        """Count the redactions in a key; True when its value is hidden whole."""
        if not isinstance(key, str):
            return False
        facts = self.key_facts(key)
        self.count += facts.redactions
        hidden = facts.secret and not _already_hidden(item)
        self.count += hidden
        return hidden

    def _collect_list(self, value: Sequence[Any]) -> None:
        plan, append, collect = _argv_plan(value), self.texts.append, self.collect
        for index, item in enumerate(value):
            if plan is not None and plan[index] != _KEEP:
                self.count += 1
                continue
            kind = type(item)
            if kind is str:
                append(item)
            elif kind not in _SCALARS:
                collect(item)

    def rebuild(self, value: Any, texts: Iterator[str]) -> Any:
        """A copy of ``value`` taking its strings, scrubbed, from ``texts`` (in `collect` order)."""
        if isinstance(value, str):
            return next(texts)
        if isinstance(value, dict):
            copied = {}
            for key, item in value.items():
                if isinstance(key, str):
                    facts = self.key_facts(key)
                    key = facts.scrubbed
                    if facts.secret and not _already_hidden(item):
                        copied[key] = REDACTED
                        continue
                copied[key] = self.rebuild(item, texts)
            return copied
        if isinstance(value, list | tuple):
            plan = _argv_plan(value) or [_KEEP] * len(value)
            return [self._rebuild_item(item, action, texts) for item, action in zip(value, plan, strict=True)]
        return value

    def _rebuild_item(self, item: Any, action: int, texts: Iterator[str]) -> Any:
        if action != _KEEP:
            return _hide(item, action)
        return self.rebuild(item, texts)

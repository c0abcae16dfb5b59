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
  `sonde.agent.scrub_rules` (key blocks and private keys printed as numbers
  (``openssl rsa -text``), cloud and vendor tokens, JWTs,
  bearer/basic credentials, URL and connection-string passwords,
  ``password=``-style assignments), then by the operator's own patterns;
- in a list of strings (an argv), what `sonde.agent.scrub_argv` finds:
  the value after a secret flag (``--password x``) and the password arguments
  of known programs (``mysql -pX``, ``redis-cli AUTH X``, ``sqlplus u/X@db``).

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

import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from sonde.agent.config import AgentConfig
from sonde.agent.scrub_argv import already_hidden, argv_plan, hide
from sonde.agent.scrub_argv_programs import KEEP
from sonde.agent.scrub_rules import SEPARATOR, compile_operator_pattern, scrub_text
from sonde.agent.secret_names import is_secret_name
from sonde.protocol.names import REDACTED

MIN_BUILTIN_CHARS = 4  # the shortest built-in shape is "pw=x"
KEY_CACHE_ENTRIES = 4096  # dict keys remembered (keys repeat across list items)
_SCALARS = frozenset({int, float, bool, type(None)})


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
        hidden = facts.secret and not already_hidden(item)
        self.count += hidden
        return hidden

    def _collect_list(self, value: Sequence[Any]) -> None:
        plan, append, collect = argv_plan(value), self.texts.append, self.collect
        for index, item in enumerate(value):
            if plan is not None and plan[index] != KEEP:
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
                    if facts.secret and not already_hidden(item):
                        copied[key] = REDACTED
                        continue
                copied[key] = self.rebuild(item, texts)
            return copied
        if isinstance(value, list | tuple):
            plan = argv_plan(value) or [KEEP] * len(value)
            return [self._rebuild_item(item, action, texts) for item, action in zip(value, plan, strict=True)]
        return value

    def _rebuild_item(self, item: Any, action: int, texts: Iterator[str]) -> Any:
        if action != KEEP:
            return hide(item, action)
        return self.rebuild(item, texts)

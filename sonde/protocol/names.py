"""Patterns of names, and the redaction mark, on the wire: in a module of their own so that packs
can use them without importing the wire models (`sonde serve` never needs those: ~5 MiB, ~50 ms).

A pattern can be given words (`worded`): a refusal of a value then says them, where pydantic
says ``String should match pattern '^[A-Za-z0-9]...'`` (`sonde.params_words.describe_params_error`).
"""

from __future__ import annotations

import re

PATTERN_WORDS: dict[str, str] = {}  # pattern -> what it asks for, "must be ..."


def worded(pattern: str, words: str) -> str:
    """``pattern``, its words noted: what a value that does not match it is told it must be.

    Words say what the pattern allows, not what the field is (the refusal names the field): the
    same pattern may check two fields. Raises ValueError if the pattern has other words already.
    """
    if PATTERN_WORDS.setdefault(pattern, words) != words:
        raise ValueError(f"pattern {pattern!r} already has other words: {PATTERN_WORDS[pattern]!r}")
    return pattern


NAME_RULE = "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
NAME_PATTERN = worded(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", NAME_RULE)
PROBE_NAME_PATTERN = worded(
    r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+){1,4}$",
    "a probe's full name, such as system.memory.usage: 2 to 5 words of lowercase letters, digits "
    "and '_', joined by dots (list_capabilities names every probe)",
)
LOWER_WORD = worded(
    r"^[a-z][a-z0-9_]{0,31}$", "1 to 32 lowercase letters, digits and '_', the first a letter"
)

# Sonde's own secrets, `sonde_` API keys and `enr_` enrollment tokens, whole or cut short:
# pasted where an id or a name was due, a message or an audit row must not repeat one.
SECRET_SHAPE = re.compile(r"(?<![A-Za-z0-9_-])(sonde|enr)_[A-Za-z0-9_-]{20,}")
# A name is stored and shown in the clear (lists, the dashboard, a model's answers, backups): a key
# pasted as one would be too, where the key itself is kept only as a hash.
SECRET_SHAPED = (
    "has the shape of a Sonde API key or enrollment token (sonde_ or enr_, then 20 or more letters, "
    "digits, '_' or '-'): a name is stored and shown in the clear, a secret never is; choose another name"
)


def refuse_secret_shape(name: str | None) -> str | None:
    """``name``, unless it has a secret's shape: ValueError (a pydantic validator's)."""
    if name is not None and SECRET_SHAPE.search(name) is not None:
        raise ValueError(f"a name that {SECRET_SHAPED}")
    return name


REDACTED = "[REDACTED]"  # what a secret reads as in anything the agent sends (the scrubber puts it)

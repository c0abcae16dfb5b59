"""API-key policies: which agents and which probes a key may reach.

A policy is two lists of globs. An agent pattern is a name glob
(``web-*``) or a tag (``#prod``). Empty or absent lists mean "everything".
Admin keys ignore their policy.
"""

from __future__ import annotations

import fnmatch
import re
import string
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sonde.echo import echoed

Role = Literal["admin", "member"]
AGENT_NAME_GLOB = r"[A-Za-z0-9*?\[\]!._-]{1,64}"
AGENT_PATTERN = rf"^(#[A-Za-z0-9][A-Za-z0-9._:-]{{0,63}}|{AGENT_NAME_GLOB})$"
PROBE_PATTERN = r"^[a-z0-9_.*?\[\]!-]{1,100}$"  # '!' and '-' only in a set: `checked_glob`
NAME_CHARACTERS = {  # of agent and probe names, by kind
    "agent": string.ascii_letters + string.digits + "._-",
    "probe": string.ascii_lowercase + string.digits + "._",
}
NameKind = Literal["agent", "probe"]
GLOB_RULES = {  # what a pattern may hold, for the message that refuses one
    "agents": (
        AGENT_PATTERN,
        "is no agent glob or #tag: use 1 to 64 of A-Z a-z 0-9 . _ - and the wildcards * ? "
        "and sets such as [0-9] or [!a], e.g. 'web-*' or '#prod'",
    ),
    "probes": (
        PROBE_PATTERN,
        "is no probe glob: use 1 to 100 of a-z 0-9 . _ and the wildcards * ? "
        "and sets such as [a-m] or [!x] (probe names are lowercase, e.g. 'system.*')",
    ),
}


def checked_glob(pattern: str, kind: NameKind = "agent") -> str:
    """``pattern`` when each of its ``[...]`` sets is closed and matches some character of a
    ``kind`` name, and each character outside a set is a wildcard or one such a name can have;
    ValueError otherwise.
    `fnmatch` reads an unclosed ``[`` as itself, a character no agent or probe name has, and a set
    such as ``[z-a]``, or a '!' outside a set, matches nothing: the glob would reach nothing."""
    name_characters, i = NAME_CHARACTERS[kind], 0
    while i < len(pattern):
        if pattern[i] != "[":
            if pattern[i] not in name_characters and pattern[i] not in "*?":
                raise ValueError(
                    f"{pattern!r} has {pattern[i]!r} outside a [set], a character no {kind} name "
                    "has: it would match nothing"
                )
            i += 1
            continue
        j = i + 1 + (pattern[i + 1 : i + 2] == "!")
        j += pattern[j : j + 1] == "]"  # a ']' first in a set is one of its characters
        end = pattern.find("]", j)
        if end == -1:
            raise ValueError(f"{pattern!r} has a '[' with no closing ']': it would match nothing")
        chosen = pattern[i : end + 1]
        if not any(fnmatch.fnmatchcase(c, chosen) for c in name_characters):
            raise ValueError(f"{pattern!r}: its set {chosen!r} matches no character a name can have")
        i = end + 1
    return pattern


def checked_probe_glob(pattern: str) -> str:
    """``pattern`` as a tool's probe glob: the characters a policy's may hold and sets that can
    match (`checked_glob`); otherwise a pydantic error whose message says what a glob may hold."""
    allowed, rule = GLOB_RULES["probes"]
    if re.fullmatch(allowed, pattern) is None:
        raise PydanticCustomError("glob_characters", "{message}", {"message": f"{echoed(pattern)} {rule}"})
    try:
        return checked_glob(pattern, "probe")
    except ValueError as exc:
        raise PydanticCustomError("glob_matches_nothing", "{message}", {"message": str(exc)}) from None


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    agents: tuple[Annotated[str, Field(pattern=AGENT_PATTERN)], ...] = ()
    probes: tuple[Annotated[str, Field(pattern=PROBE_PATTERN)], ...] = ()

    def allows_agent(self, name: str, tags: Iterable[str]) -> bool:
        if not self.agents:
            return True
        tag_set = {t.lower() for t in tags}
        for pattern in self.agents:
            if pattern.startswith("#"):
                if pattern[1:].lower() in tag_set:
                    return True
            elif fnmatch.fnmatchcase(name, pattern):
                return True
        return False

    def allows_probe(self, probe: str) -> bool:
        return not self.probes or any(fnmatch.fnmatchcase(probe, p) for p in self.probes)

    def describe(self) -> str:
        agents = ", ".join(self.agents) or "all agents"
        probes = ", ".join(self.probes) or "all probes"
        return f"agents: {agents}; probes: {probes}"


class NewPolicy(Policy):
    """A policy given to a new key, by the CLI or REST alike: each glob must be able to match
    (`checked_glob`). A key stored before this check keeps loading as a `Policy`."""

    @field_validator("agents", "probes", mode="before")
    @classmethod
    def _characters_said_plainly(cls, patterns: object, info: ValidationInfo) -> object:
        """A pattern with a character no name has, refused saying which characters a pattern may
        hold (the `Policy` field's own error is the bare regular expression)."""
        allowed, rule = GLOB_RULES[str(info.field_name)]
        for pattern in patterns if isinstance(patterns, list | tuple) else ():
            if isinstance(pattern, str) and re.fullmatch(allowed, pattern) is None:
                raise PydanticCustomError(
                    "glob_characters", "{message}", {"message": f"{echoed(pattern)} {rule}"}
                )
        return patterns

    @field_validator("agents", "probes")
    @classmethod
    def _globs_can_match(cls, patterns: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        kind: NameKind = "probe" if info.field_name == "probes" else "agent"
        for pattern in patterns:
            if not pattern.startswith("#"):  # a tag is no glob
                checked_glob(pattern, kind)
        return patterns


UNRESTRICTED = Policy()


def unmatched_probe_globs(globs: Iterable[str], probe_names: Iterable[str]) -> list[str]:
    """The probe globs of ``globs`` that match none of ``probe_names``."""
    names = list(probe_names)
    return [glob for glob in globs if not any(fnmatch.fnmatchcase(name, glob) for name in names)]


def unmatched_agent_patterns(
    patterns: Iterable[str], agents: Iterable[tuple[str, Iterable[str]]]
) -> list[str]:
    """The agent patterns of ``patterns`` (name globs and ``#tags``) that match none of ``agents``,
    given as (name, tags), as a policy matches them."""
    known = [(name, list(tags)) for name, tags in agents]
    return [
        pattern
        for pattern in patterns
        if not any(Policy(agents=(pattern,)).allows_agent(name, tags) for name, tags in known)
    ]


def normalize_tags(tags: Iterable[str]) -> list[str]:
    """Tags as the user typed them, without a leading ``#`` and blanks."""
    return [t.strip().lstrip("#") for t in tags if t.strip().lstrip("#")]


def has_tags(agent_tags: Iterable[str], wanted: Iterable[str]) -> bool:
    """All of ``wanted`` (AND) are among ``agent_tags`` (case-insensitive)."""
    have = {t.lower() for t in agent_tags}
    return all(t.lower() in have for t in normalize_tags(wanted))

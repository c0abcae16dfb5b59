"""What `sonde hub agent tag` makes of an agent's tags: the tags given (replacing them), or its
tags with some added or removed, or none; each tag checked as `PUT /api/v1/agents/{id}/tags`
checks it (`normalize_tags`: a leading ``#`` dropped, one tag per spelling whatever its case)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sonde.echo import echoed
from sonde.hub.admin import checked_argument
from sonde.hub.agent_records import TAG_PATTERN, normalize_tags

_TAG_RE = re.compile(TAG_PATTERN)
TAG_RULE = "a tag starts with a letter or digit, then up to 63 of letters, digits, '.', '_', ':' or '-'"


class TagsUnchanged(Exception):
    """The change leaves the tags as they were (exit 0), or cannot be made (exit 1): said, not written."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class TagChange:
    """The tags to set (replacing all), or to add and remove (keeping the others), or clear."""

    set_to: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    clear: bool = False

    def check(self) -> None:
        """ValueError (a usage error) unless one form is given, with tags an agent can have."""
        forms = [bool(self.set_to), bool(self.add or self.remove), self.clear]
        if not any(forms):
            raise ValueError("give the tags to set (TAG...), or --add, --remove or --clear")
        if sum(forms) > 1:
            raise ValueError(
                "give either the tags to set (TAG...) or --add/--remove/--clear, one form at a time "
                "(--add and --remove go together)"
            )
        for tag in (*self.set_to, *self.add, *self.remove):
            checked_tag(tag)
        normalize_tags(self.set_to)  # not too many


def checked_tag(tag: str) -> str:
    """``tag`` when an agent can have it (a leading '#' aside); ValueError saying the rule otherwise."""
    checked_argument("tag", tag)
    if not _TAG_RE.fullmatch(tag.strip().removeprefix("#").strip()):
        raise ValueError(f"invalid tag {echoed(tag)}: {TAG_RULE} (a leading '#' is dropped)")
    return tag


def changed_tags(agent: str, current: Sequence[str], change: TagChange) -> list[str]:
    """The tags ``agent`` (holding ``current``) has after ``change``. Raises `TagsUnchanged` when
    they stay as they are, or when ``change.remove`` names a tag it does not have; ValueError
    past the most tags an agent may have."""
    if change.clear:
        tags: list[str] = []
    elif change.set_to:
        tags = normalize_tags(change.set_to)
    else:
        removed = normalize_tags(change.remove)
        have = {tag.lower() for tag in current}
        missing = [tag for tag in removed if tag.lower() not in have]
        if missing:
            raise TagsUnchanged(
                f"agent {agent} has no tag {', '.join(echoed(tag) for tag in missing)} "
                f"(its tags: {', '.join(current) or 'none'}); nothing changed",
                1,
            )
        gone = {tag.lower() for tag in removed}
        tags = normalize_tags([*(tag for tag in current if tag.lower() not in gone), *change.add])
    if tags == list(current):
        has = f"the tags {', '.join(tags)}" if tags else "no tags"
        raise TagsUnchanged(f"agent {agent} already has {has}; nothing changed", 0)
    return tags

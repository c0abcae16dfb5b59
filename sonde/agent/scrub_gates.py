"""The scrubber's gates: the cheap tests a text passes before a rule's pattern runs on it.

A gate is a substring test (`contains`): the text holds one of a few needles ("PRIVATE KEY",
"://", "password" ...). A scrub runs some 200 of them, each over the whole text, so on a long
text (a log probe scrubs ~1 MiB of lines as one) they cost more than the rules' patterns do.
CPython searches for a needle of two characters or more at about 0.5 ms a MiB whatever the
text, but for one character at memory speed (memchr, ~0.01 ms a MiB). So a long text is first
searched for each of a needle's characters (`may_hold`): a needle with one the text lacks
cannot be in it, and is not searched for. A log of numbers lacks every letter, and most needles
hold one: its gates cost next to nothing. An ordinary text, which holds most characters, pays a
few character searches more per needle, each found near its start. The answers are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# From this length on a text is searched for a needle's characters before the needle itself
# (below it a needle is found about as fast as one character).
SPELLED_MIN_CHARS = 4096


def may_hold(text: str, needles: tuple[str, ...]) -> Iterable[str]:
    """Those of ``needles`` that ``text`` may hold: the ones whose every character it holds
    (all of them when ``text`` is shorter than `SPELLED_MIN_CHARS`)."""
    if len(text) < SPELLED_MIN_CHARS:
        return needles
    return (needle for needle in needles if all(char in text for char in needle))


def contains(*needles: str) -> Callable[[str, str], bool]:
    """A gate: the text holds one of ``needles``."""
    return lambda text, lower: any(needle in text for needle in may_hold(text, needles))


def contains_folded(*needles: str) -> Callable[[str, str], bool]:
    """A gate: the lowercased text holds one of ``needles``."""
    return lambda text, lower: any(needle in lower for needle in may_hold(lower, needles))


def long_with(char: str, min_chars: int = 15) -> Callable[[str, str], bool]:
    """A gate: the text is ``min_chars`` long at least and holds ``char``."""
    return lambda text, lower: len(text) >= min_chars and char in text

"""The scrubber's gates answer alike on a long text, where they search a needle's characters first.

A scrub runs ~200 gates over its whole text. A log probe scrubs ~1 MiB of lines as one text, and a
gate searched each needle at ~0.5 ms a MiB: on a log of numbers, whose lines all matched no rule,
the gates took ~100 ms for each MiB scrubbed and a filtered `system.logs.head` of 17 MB ran past
its 15 s deadline. A long text is now first searched for each of a needle's characters (one
character is found at memory speed); these tests hold the answers to what a plain search gives.
"""

from __future__ import annotations

import pytest

from sonde.agent.scrub_gates import SPELLED_MIN_CHARS, contains, contains_folded, may_hold
from sonde.agent.scrub_rules import scrub_text
from tests.security.scrub_corpus import LOOK_ALIKES, SECRETS, LookAlike, SecretCase

NUMBERS = "\n".join(str(number) for number in range(2000))  # a log of numbers: no letter in it
NEEDLES = ("password", "PRIVATE KEY", "://", "@tcp(", "pw", "x", "aa", "sig=", "ŝecret", "key😀")


def long_texts() -> list[str]:
    """Texts past `SPELLED_MIN_CHARS` holding a needle, its characters only, or neither, at
    either end, in one-, two- and four-byte strings."""
    filler = "-" * SPELLED_MIN_CHARS
    texts = []
    for middle in ("password", "drowssap", "PRIVATE  KEY", "tcp@(", "p w", "a", "sig =", "ŝecret", "key😀"):
        texts += [filler + middle, middle + filler, filler + middle + filler]
    return [*texts, filler, NUMBERS, NUMBERS + "é", NUMBERS + "😀"]


@pytest.mark.parametrize("text", long_texts())
def test_a_gate_on_a_long_text_answers_as_a_plain_search(text: str) -> None:
    assert len(text) >= SPELLED_MIN_CHARS
    for needle in NEEDLES:
        held = needle in text
        assert contains(needle)(text, text.lower()) is held, needle
        assert contains_folded(needle)(text.upper(), text) is held, needle
        assert (needle in may_hold(text, (needle,))) >= held, needle  # a needle held is never left out


def test_a_long_text_is_searched_only_for_the_needles_it_may_hold() -> None:
    assert list(may_hold(NUMBERS, NEEDLES)) == []
    assert list(may_hold(NUMBERS + "@tcp(", NEEDLES)) == ["@tcp("]
    assert list(may_hold(NUMBERS[:100], NEEDLES)) == list(NEEDLES)  # a short one for all of them


@pytest.mark.parametrize("case", SECRETS, ids=lambda case: case.name)
def test_a_secret_after_a_long_log_of_numbers_is_hidden_as_alone(case: SecretCase) -> None:
    # after a NUL: a string of its own in the text, as the scrubber joins a result's strings
    scrubbed, count = scrub_text(NUMBERS + "\x00" + case.text)
    assert (scrubbed, count) == (NUMBERS + "\x00" + scrub_text(case.text)[0], scrub_text(case.text)[1])
    assert case.secret not in scrubbed


@pytest.mark.parametrize("case", LOOK_ALIKES, ids=lambda case: case.name)
def test_a_look_alike_after_a_long_log_of_numbers_survives(case: LookAlike) -> None:
    text = NUMBERS + "\x00" + case.text
    assert scrub_text(text) == (text, 0)

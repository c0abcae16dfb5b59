"""`escapes_lone_surrogate` catches JSON that is not text (not whole pairs or look-alikes);
`valid_text` / `valid_unicode` repair text of our own that is not."""

from __future__ import annotations

import json

import pytest

from sonde.protocol.jsontext import (
    RepeatedKey,
    encodable,
    escapes_lone_surrogate,
    loads_unique,
    valid_text,
    valid_unicode,
)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize(
    ("text", "lone"),
    [
        ('{"a":"\\ud800"}', True),
        ('{"a":"x\\uDFFF"}', True),
        ('{"\\udc80":1}', True),  # a key too
        ('["\\ud83d\\ude00"]', False),  # a whole pair: an emoji
        ('{"a":"C:\\\\udev"}', False),  # a backslash, then "udev"
        ('{"a":"\\u00e9"}', False),
        ('{"a":"plain"}', False),
    ],
)
def test_lone_surrogates_are_caught_and_nothing_else(text: str, lone: bool, as_bytes: bool) -> None:
    value = json.loads(text)
    assert escapes_lone_surrogate(text.encode() if as_bytes else text, value) is lone
    assert encodable(value) is not lone


def test_bytes_that_were_not_utf8_are_shown_escaped() -> None:
    name = b"\xff\xfesleeper".decode("utf-8", "surrogateescape")  # how os and psutil hand them over
    assert valid_text(name) == "\\xff\\xfesleeper"
    assert valid_text("caf\udcc3\udca9") == "café"  # escaped bytes that are UTF-8 after all


def test_a_stray_surrogate_is_shown_as_its_escape_and_good_text_is_unchanged() -> None:
    assert valid_text("x\ud800y") == "x\\ud800y"
    assert valid_text("ok \U0001f600 é") == "ok \U0001f600 é"


def test_every_string_of_a_result_is_made_valid_keys_included() -> None:
    bad = "\udcff"
    result = {"a": [bad, {bad: 1, "n": 2.5, "t": True, "z": None}]}
    assert valid_unicode(result) == {"a": ["\\xff", {"\\xff": 1, "n": 2.5, "t": True, "z": None}]}


def test_an_object_repeating_a_key_is_refused_at_any_depth() -> None:
    assert loads_unique('{"a": 1, "b": {"c": [1, {"d": 2}]}}') == {"a": 1, "b": {"c": [1, {"d": 2}]}}
    for text in ('{"a": 1, "a": 2}', '{"a": {"b": 1, "b": 1}}', '[{"x": 0}, {"y": 1, "y": 1}]'):
        with pytest.raises(RepeatedKey):
            loads_unique(text)
    with pytest.raises(ValueError, match='the key "a" appears twice'):
        loads_unique(b'{"a": 1, "a": 2}')

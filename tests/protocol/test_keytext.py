"""Key text: base64 of exactly 32 bytes, or an error naming the key."""

from __future__ import annotations

import base64

import pytest

from sonde.protocol.keytext import key_bytes
from sonde.protocol.signing import new_private_key, private_key_from_text, private_key_to_text


def test_a_key_round_trips_through_its_text() -> None:
    key = new_private_key()
    text = private_key_to_text(key)
    assert len(key_bytes(text, "a key")) == 32
    assert private_key_to_text(private_key_from_text(text)) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not base64!", "the hub key is not base64"),
        (base64.b64encode(bytes(31)).decode(), "the hub key must be 32 bytes, not 31"),
        (base64.b64encode(bytes(64)).decode(), "the hub key must be 32 bytes, not 64"),
    ],
)
def test_anything_else_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        key_bytes(text, "the hub key")

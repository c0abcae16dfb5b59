"""Known-answer tests: our key handling and HKDF give exactly the published results.

Ed25519 from RFC 8032 (section 7.1, test 1 and test 3), HKDF-SHA256 from RFC
5869 (test cases 1 and 3). They pin the wire to the standards, whichever
library computes them.
"""

from __future__ import annotations

import base64

import pytest

from sonde.protocol.linkkeys import hkdf_sha256
from sonde.protocol.signing import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
    private_key_from_text,
    private_key_to_text,
    public_key_from_text,
    public_key_to_text,
)

RFC8032 = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


@pytest.mark.parametrize(("seed", "public", "message", "signature"), RFC8032)
def test_ed25519_rfc8032(seed: str, public: str, message: str, signature: str) -> None:
    key = Ed25519PrivateKey(bytes.fromhex(seed))
    assert key.public_key().raw().hex() == public
    assert key.sign(bytes.fromhex(message)).hex() == signature
    key.public_key().verify(bytes.fromhex(signature), bytes.fromhex(message))
    with pytest.raises(ValueError, match="does not verify"):
        key.public_key().verify(bytes.fromhex(signature), bytes.fromhex(message) + b"x")


def test_keys_travel_as_base64_of_their_raw_bytes() -> None:
    seed, public, _, _ = RFC8032[0]
    text = base64.b64encode(bytes.fromhex(seed)).decode()
    key = private_key_from_text(text)
    assert private_key_to_text(key) == text
    public_text = public_key_to_text(key.public_key())
    assert base64.b64decode(public_text).hex() == public
    assert public_key_from_text(public_text) == key.public_key()
    assert public_key_from_text(public_text) != Ed25519PublicKey(bytes(32))
    assert "9d61" not in repr(key)


@pytest.mark.parametrize(
    ("ikm", "salt", "info", "okm"),
    [
        (
            "0b" * 22,
            "000102030405060708090a0b0c",
            "f0f1f2f3f4f5f6f7f8f9",
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        ),
        (
            "0b" * 22,
            "",
            "",
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
        ),
    ],
)
def test_hkdf_sha256_rfc5869(ikm: str, salt: str, info: str, okm: str) -> None:
    derived = hkdf_sha256(bytes.fromhex(ikm), salt=bytes.fromhex(salt), info=bytes.fromhex(info), length=42)
    assert derived.hex() == okm


def test_hkdf_sha256_refuses_more_than_it_can_give() -> None:
    assert len(hkdf_sha256(b"k", salt=b"s", info=b"i", length=255 * 32)) == 255 * 32
    with pytest.raises(ValueError, match="at most"):
        hkdf_sha256(b"k", salt=b"s", info=b"i", length=255 * 32 + 1)

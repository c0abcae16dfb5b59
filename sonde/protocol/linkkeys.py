"""Per-connection link keys: one X25519 exchange at register, then HMAC-SHA256 on every frame.

The two ends authenticate each other once, with Ed25519: the agent's signed
``agent.register`` carries a fresh X25519 public key (``linkKey``), and the
hub's signed ``hub.ack`` carries another. Both ends derive two 32-byte keys
from the shared secret with HKDF-SHA256 (`hkdf_sha256`, salted with both public keys, one key
per direction), and from then on every frame of that connection, both ways,
carries an HMAC-SHA256 of its exact text in ``sig`` (its last key) instead of
an Ed25519 signature over its canonical form (`sonde.protocol.signing.mac_text`).

Why: checking an Ed25519 signature costs ~110 µs and making one ~35 µs on this
machine kind, plus a sorted re-dump of the frame on each end; an HMAC of the
text as sent costs ~3 µs. A probe crosses the link twice and a hub
receives a heartbeat from every agent every interval, so per-frame signatures
were the largest cost of a fan-out and of an idle fleet. What each frame
proves is unchanged: it comes from the peer that signed the register (or the
ack) of this very connection, unaltered; the timestamp window and the nonce
cache still refuse replays. A frame captured on one connection is useless on
any other (fresh keys per connection), and nobody who only sees the traffic
can derive the keys (ephemeral Diffie-Hellman), with or without TLS.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from nacl.bindings import crypto_scalarmult, crypto_scalarmult_base
from nacl.exceptions import CryptoError
from nacl.utils import random

from sonde.protocol.keytext import KEY_BYTES, key_bytes

Role = Literal["agent", "hub"]
_INFO = b"sonde link keys v1"


@dataclass(frozen=True)
class LinkKeys:
    """HMAC keys of one connection: ``send`` for our frames, ``receive`` for the peer's."""

    send: bytes
    receive: bytes


class LinkKeyExchange:
    """One end's ephemeral X25519 key for one connection."""

    def __init__(self) -> None:
        self._private = random(KEY_BYTES)
        self.public_text = base64.b64encode(crypto_scalarmult_base(self._private)).decode("ascii")

    def derive(self, peer_text: str, role: Role) -> LinkKeys:
        """Both directions' keys, from the peer's ``linkKey``; `ValueError` if it is not a usable key."""
        peer_raw = key_bytes(peer_text, "linkKey")
        try:
            shared = crypto_scalarmult(self._private, peer_raw)
        except CryptoError:  # a low-order point: libsodium refuses the all-zero secret
            raise ValueError("linkKey is not a usable X25519 public key") from None
        agent_pub, hub_pub = (
            (self.public_text, peer_text) if role == "agent" else (peer_text, self.public_text)
        )
        salt = f"{agent_pub}|{hub_pub}".encode("ascii")
        material = hkdf_sha256(shared, salt=salt, info=_INFO, length=64)
        agent_to_hub, hub_to_agent = material[:32], material[32:]
        if role == "agent":
            return LinkKeys(send=agent_to_hub, receive=hub_to_agent)
        return LinkKeys(send=hub_to_agent, receive=agent_to_hub)


def hkdf_sha256(secret: bytes, *, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 (RFC 5869): extract with ``salt``, expand to ``length`` bytes with ``info``."""
    if length > 255 * hashlib.sha256().digest_size:
        raise ValueError("HKDF-SHA256 gives at most 8160 bytes")
    prk = hmac.digest(salt, secret, "sha256")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:length]

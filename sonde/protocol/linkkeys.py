"""Per-connection link keys: one X25519 exchange at register, then HMAC-SHA256 on every frame.

The two ends authenticate each other once, with Ed25519: the agent's signed
``agent.register`` carries a fresh X25519 public key (``linkKey``), and the
hub's signed ``hub.ack`` carries another. Both ends derive two 32-byte keys
from the shared secret with HKDF-SHA256 (salted with both public keys, one key
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
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from sonde.protocol.keytext import key_bytes

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
        self._private = X25519PrivateKey.generate()
        raw = self._private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public_text = base64.b64encode(raw).decode("ascii")

    def derive(self, peer_text: str, role: Role) -> LinkKeys:
        """Both directions' keys, from the peer's ``linkKey``; `ValueError` if it is not a usable key."""
        peer_raw = key_bytes(peer_text, "linkKey")
        try:
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(peer_raw))
        except ValueError:  # a low-order point: no shared secret
            raise ValueError("linkKey is not a usable X25519 public key") from None
        agent_pub, hub_pub = (
            (self.public_text, peer_text) if role == "agent" else (peer_text, self.public_text)
        )
        salt = f"{agent_pub}|{hub_pub}".encode("ascii")
        material = HKDF(algorithm=hashes.SHA256(), length=64, salt=salt, info=_INFO).derive(shared)
        agent_to_hub, hub_to_agent = material[:32], material[32:]
        if role == "agent":
            return LinkKeys(send=agent_to_hub, receive=hub_to_agent)
        return LinkKeys(send=hub_to_agent, receive=agent_to_hub)

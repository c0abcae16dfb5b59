"""Ed25519 signatures (and link-key HMACs) over the canonical envelope, and replay protection.

The canonical form of a frame is its JSON object without ``sig``, dumped with
sorted keys, no spaces and UTF-8 text. A frame is accepted only when its
signature verifies with the peer's key, its ``ts`` lies inside the window and
its ``nonce`` has not been seen inside that window.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections import OrderedDict
from datetime import datetime
from typing import Any, Literal

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from sonde.protocol.errors import SignatureError
from sonde.protocol.keytext import key_bytes

TIMESTAMP_WINDOW_S = 120.0
NONCE_CACHE_MAX = 200_000

Side = Literal["agent", "hub"]  # who sent the frames a guard checks: names both clocks in its errors
_CLOCKS: dict[Side | None, tuple[str, str]] = {
    "agent": ("the agent's", "the hub's"),
    "hub": ("the hub's", "the agent's"),
    None: ("the peer's", "this machine's"),
}


def clock_skew_text(peer_ahead_s: float, window_s: float, peer: Side | None) -> str:
    """Which clock is ahead and by how much, e.g. "the agent's clock is 300 s ahead of the hub's
    (window ±120 s): clocks disagree (is NTP running on both?)".

    ``peer_ahead_s`` is the frame's timestamp minus the receiver's clock: positive when the
    sender's clock is ahead (its frames look early), negative when it is behind.
    """
    theirs, ours = _CLOCKS[peer]
    direction = "ahead of" if peer_ahead_s > 0 else "behind"
    return (
        f"{theirs} clock is {abs(peer_ahead_s):.0f} s {direction} {ours} (window ±{window_s:.0f} s): "
        "clocks disagree (is NTP running on both?)"
    )


class StaleFrame(SignatureError):
    """A frame whose timestamp lies outside the window (code ``stale``): the clocks disagree.

    The codec checks the signature or MAC first, so ``frame`` (set by the codec, the typed
    message) is authentic, only early or late: the link can still answer it, and a reject
    bound to this very connection attempt can still be read.
    """

    def __init__(self, peer_ahead_s: float, window_s: float, peer: Side | None) -> None:
        super().__init__("stale", clock_skew_text(peer_ahead_s, window_s, peer))
        self.peer_ahead_s = peer_ahead_s
        self.window_s = window_s
        self.frame: Any = None


def canonical_bytes(frame: dict[str, Any]) -> bytes:
    """The bytes a signature covers: the frame without ``sig``."""
    unsigned = {key: value for key, value in frame.items() if key != "sig"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_frame(frame: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """Return ``frame`` with ``sig`` set to the signature of its canonical form."""
    signature = key.sign(canonical_bytes(frame))
    return {**frame, "sig": base64.b64encode(signature).decode("ascii")}


def verify_frame(frame: dict[str, Any], key: Ed25519PublicKey) -> None:
    """Raise `SignatureError` unless ``frame`` carries a valid signature by ``key``."""
    sig = frame.get("sig")
    if not isinstance(sig, str) or not sig:
        raise SignatureError("unsigned", "frame is not signed")
    try:
        signature = base64.b64decode(sig, validate=True)
        key.verify(signature, canonical_bytes(frame))
    except ValueError as exc:
        raise SignatureError("bad_signature", "frame signature does not verify") from exc


def mac_text(body: str, key: bytes) -> str:
    """``body`` (a frame's JSON text, without ``sig``) with ``sig`` = HMAC-SHA256 of that exact text.

    Link frames are authenticated over the bytes sent, not a canonical form:
    no second JSON dump on either end. ``sig`` is appended as the last key.
    """
    digest = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f'{body[:-1]},"sig":"{base64.b64encode(digest).decode("ascii")}"}}'


def verify_mac_text(text: str, frame: dict[str, Any], key: bytes) -> None:
    """Raise `SignatureError` unless ``text`` (parsed as ``frame``) carries a valid link-key HMAC.

    The frame must end with ``,"sig":"<its HMAC>"}``; the HMAC covers everything
    before that, so what parsed is exactly what the peer sent plus ``sig``.
    """
    sig = frame.get("sig")
    if not isinstance(sig, str) or not sig:
        raise SignatureError("unsigned", "frame is not signed")
    suffix = f',"sig":"{sig}"}}'
    if not text.endswith(suffix):
        raise SignatureError("bad_signature", "frame signature does not verify")
    body = text[: -len(suffix)] + "}"
    expected = base64.b64encode(hmac.new(key, body.encode(), hashlib.sha256).digest()).decode("ascii")
    if not hmac.compare_digest(sig.encode("utf-8", "replace"), expected.encode("ascii")):
        raise SignatureError("bad_signature", "frame signature does not verify")


class ReplayGuard:
    """Rejects frames outside the timestamp window and nonces seen before.

    Memory is bounded: nonces older than the window are forgotten, and past
    ``max_nonces`` live entries new frames are refused rather than remembered.
    ``peer`` says who sends the frames checked, so a `StaleFrame` names whose clock is ahead.
    """

    def __init__(
        self,
        window_s: float = TIMESTAMP_WINDOW_S,
        max_nonces: int = NONCE_CACHE_MAX,
        *,
        peer: Side | None = None,
    ) -> None:
        self.window_s = window_s
        self.max_nonces = max_nonces
        self.peer = peer
        self._seen: OrderedDict[str, float] = OrderedDict()

    def check(self, nonce: str, ts: datetime, now: datetime) -> None:
        """Record ``nonce``; raise `StaleFrame` for a frame too early or too late, `SignatureError`
        for a replayed one (or too many inside the window)."""
        peer_ahead_s = (ts - now).total_seconds()
        if abs(peer_ahead_s) > self.window_s:
            raise StaleFrame(peer_ahead_s, self.window_s, self.peer)
        now_s = now.timestamp()
        self._forget_older_than(now_s - self.window_s)
        if nonce in self._seen:
            raise SignatureError("replayed", "frame nonce was already used (replay)")
        if len(self._seen) >= self.max_nonces:
            raise SignatureError("replay_cache_full", "too many frames inside the replay window")
        self._seen[nonce] = now_s

    def _forget_older_than(self, cutoff_s: float) -> None:
        while self._seen:
            nonce, seen_at = next(iter(self._seen.items()))
            if seen_at >= cutoff_s:
                return
            del self._seen[nonce]


# --- key handling ---------------------------------------------------------
#
# Ed25519 through PyNaCl (libsodium): the same keys, signatures and raw 32-byte
# forms as any other Ed25519, at a fraction of the memory of a library that
# brings all of OpenSSL along (the agent is resident on every server).


class Ed25519PublicKey:
    """An Ed25519 public key."""

    __slots__ = ("_key",)

    def __init__(self, raw: bytes) -> None:
        self._key = VerifyKey(raw)

    def raw(self) -> bytes:
        return bytes(self._key)

    def verify(self, signature: bytes, data: bytes) -> None:
        """Raise `ValueError` unless ``signature`` is this key's signature of ``data``."""
        try:
            self._key.verify(data, signature)
        except BadSignatureError:
            raise ValueError("the signature does not verify") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ed25519PublicKey) and self.raw() == other.raw()

    def __hash__(self) -> int:
        return hash(self.raw())


class Ed25519PrivateKey:
    """An Ed25519 private key (its 32-byte seed)."""

    __slots__ = ("_key",)

    def __init__(self, seed: bytes) -> None:
        self._key = SigningKey(seed)

    @classmethod
    def generate(cls) -> Ed25519PrivateKey:
        return cls(bytes(SigningKey.generate()))

    def raw(self) -> bytes:
        return bytes(self._key)

    def public_key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey(bytes(self._key.verify_key))

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data).signature

    def __repr__(self) -> str:
        return "Ed25519PrivateKey(...)"


def new_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_to_text(key: Ed25519PrivateKey) -> str:
    return base64.b64encode(key.raw()).decode("ascii")


def private_key_from_text(text: str) -> Ed25519PrivateKey:
    """Parse a base64 raw Ed25519 private key; `ValueError` if it is not one."""
    return Ed25519PrivateKey(key_bytes(text, "an Ed25519 private key"))


def public_key_to_text(key: Ed25519PublicKey) -> str:
    return base64.b64encode(key.raw()).decode("ascii")


def public_key_from_text(text: str) -> Ed25519PublicKey:
    """Parse a base64 raw Ed25519 public key; `ValueError` if it is not one."""
    return Ed25519PublicKey(key_bytes(text, "an Ed25519 public key"))

"""Keys as text: base64 of exactly 32 raw bytes, as Ed25519 and X25519 keys travel and are stored.

Checked here without the crypto library, so that reading an agent config does not load it.
"""

from __future__ import annotations

import base64
import binascii

KEY_BYTES = 32


def key_bytes(text: str, what: str) -> bytes:
    """The raw bytes of ``text``; `ValueError` naming ``what`` unless it is base64 of 32 bytes."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError(f"{what} is not base64") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(f"{what} must be {KEY_BYTES} bytes, not {len(raw)}")
    return raw

"""The hub's TLS certificate and key, checked before anything is started with them.

OpenSSL's own errors name neither the file nor the fix (``[SSL] PEM lib
(_ssl.c:3905)``), and an encrypted key would make it ask for a passphrase on
the terminal of a service. Each file is loaded on its own first, so the message
says which one is wrong and how.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

from sonde.hub.utc_times import utc_text

EXPIRY_WARNING_S = 14 * 86400


class TLSFileError(ValueError):
    """A certificate or key the hub cannot serve with; the message says which file and why."""


def _no_passphrase() -> str:
    raise TLSFileError("encrypted")


def check_tls_files(cert: Path, key: Path) -> None:
    """Raise `TLSFileError` unless ``cert`` and ``key`` load as a matching certificate and key."""
    probe = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        probe.load_verify_locations(cafile=str(cert))
    except (ssl.SSLError, OSError) as exc:
        raise TLSFileError(
            f"--tls-cert {cert} holds no PEM certificate ({reason(exc)}); "
            "it must start with -----BEGIN CERTIFICATE-----"
        ) from None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert), str(key), password=_no_passphrase)
    except TLSFileError:
        raise TLSFileError(
            f"--tls-key {key} is encrypted; the hub cannot ask for a passphrase: "
            "decrypt it (openssl pkey -in KEY -out KEY.plain) and keep it readable by the hub's user only"
        ) from None
    except (ssl.SSLError, OSError) as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise TLSFileError(
                f"--tls-key {key} is not the private key of the certificate in --tls-cert {cert}"
            ) from None
        raise TLSFileError(
            f"--tls-key {key} holds no usable PEM private key ({reason(exc)}); "
            "it must start with -----BEGIN PRIVATE KEY----- (or an RSA/EC variant)"
        ) from None


def expiry_problem(cert: Path, now: float | None = None) -> str | None:
    """A warning when the certificate has expired or expires within two weeks, else None."""
    decode = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]  # CPython's reader
    if decode is None:
        return None
    try:
        not_after = ssl.cert_time_to_seconds(decode(str(cert))["notAfter"])
    except (ssl.SSLError, OSError, KeyError, ValueError):
        return None
    left = not_after - (time.time() if now is None else now)
    when = utc_text(not_after)
    if left <= 0:
        return f"the TLS certificate {cert} expired at {when}: agents and clients will refuse the hub until it is renewed"
    if left < EXPIRY_WARNING_S:
        return f"the TLS certificate {cert} expires at {when}, in {left / 86400:.1f} days: renew it"
    return None


def reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)

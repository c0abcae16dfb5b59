"""Words for a failure to reach the hub, from a Sonde client (agent, bridge, login).

The libraries wrap the real error a layer or two down (trio's
`BrokenResourceError` over OpenSSL's, urllib's `URLError`, httpx's
`ConnectError` with an empty message); this finds it and says what it means
and, for TLS, what to do.
"""

from __future__ import annotations

import ssl

PRIVATE_CA_ADVICE = (
    "if the hub's certificate comes from your own CA, point SSL_CERT_FILE at that CA's certificate (PEM)"
)
# OpenSSL's X509_V_ERR_CERT_NOT_YET_VALID and X509_V_ERR_CERT_HAS_EXPIRED: measured against this
# machine's clock, so a clock days off gives them for a certificate that is fine
CLOCK_VERIFY_CODES = frozenset({9, 10})
CLOCK_ADVICE = (
    "check this machine's clock first (`date -u`; `timedatectl status` says whether NTP keeps it), "
    "then the certificate's dates (`openssl x509 -noout -dates -in CERT`)"
)


def tls_error_in(exc: BaseException) -> ssl.SSLError | None:
    """The `ssl.SSLError` that ``exc`` is or was raised from, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return current
        reason = getattr(current, "reason", None)  # urllib's URLError keeps it here
        if isinstance(reason, ssl.SSLError):
            return reason
        current = current.__cause__ or current.__context__
    return None


def describe_tls_failure(exc: BaseException) -> str | None:
    """A sentence for a TLS failure in ``exc``'s chain, else None."""
    error = tls_error_in(exc)
    if error is None:
        return None
    if isinstance(error, ssl.SSLCertVerificationError):
        advice = CLOCK_ADVICE if error.verify_code in CLOCK_VERIFY_CODES else PRIVATE_CA_ADVICE
        return f"the hub's TLS certificate does not verify ({error.verify_message}); {advice}"
    reason = error.reason or str(error)
    if reason == "WRONG_VERSION_NUMBER":
        return "the hub did not answer TLS (WRONG_VERSION_NUMBER): does it serve plain http? then use an http:// URL"
    return f"the TLS handshake with the hub failed ({reason})"


def describe_failure(exc: BaseException) -> str:
    """``ConnectError: <why>``: the TLS failure in words, or the first non-empty message down the
    exception's chain (httpx's own is often empty)."""
    tls = describe_tls_failure(exc)
    if tls is not None:
        return f"{type(exc).__name__}: {tls}"
    cause: BaseException | None = exc
    while cause is not None and not str(cause):
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {cause}" if cause is not None else type(exc).__name__

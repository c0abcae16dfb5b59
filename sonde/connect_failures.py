"""Words for a failure to reach the hub, from a Sonde client (agent, bridge, login).

The libraries wrap the real error a layer or two down (trio's
`BrokenResourceError` over OpenSSL's, urllib's `URLError`, httpx's
`ConnectError` with an empty message); this finds it and says what it means
and, for TLS, what to do.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator

# trio's ConnectionRefusedError: "Error connecting to ('127.0.0.1', 3000): Connection refused"
ADDRESS = re.compile(r"\('([^']+)', (\d+)")
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


def os_errors_in(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the members of every exception group among them."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
        stack.extend(e for e in (current.__context__, current.__cause__) if e is not None)


def describe_connect_error(exc: BaseException) -> str | None:
    """Words for the refusal, timeout or name lookup failure under ``exc`` (httpx keeps it inside an
    exception group, a few causes down), else None."""
    for error in os_errors_in(exc):
        if isinstance(error, ConnectionRefusedError):
            where = ADDRESS.search(str(error))
            at = f"at {where.group(1)}:{where.group(2)}" if where else "there"
            return f"connection refused: nothing listens {at} (is the hub running?)"
        if isinstance(error, socket.gaierror):
            return f"the hub's host name does not resolve ({error.strerror}): check the URL, or DNS"
        if isinstance(error, TimeoutError) or type(error).__name__ == "ConnectTimeout":
            return "no connection within the time allowed (the host down, or a firewall dropping packets?)"
        if isinstance(error, OSError) and error.errno is not None and error.strerror:
            return f"cannot connect: {error.strerror.lower()}"
    return None


def describe_failure(exc: BaseException) -> str:
    """The TLS failure in words; a refused, timed-out or unresolved connection in words; else
    ``ConnectError: <why>``, the first non-empty message down the exception's chain (httpx's
    own is often empty)."""
    tls = describe_tls_failure(exc)
    if tls is not None:
        return f"{type(exc).__name__}: {tls}"
    connect = describe_connect_error(exc)
    if connect is not None:
        return connect
    cause: BaseException | None = exc
    while cause is not None and not str(cause):
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {cause}" if cause is not None else type(exc).__name__

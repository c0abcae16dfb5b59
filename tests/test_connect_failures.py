"""What a client says when the hub's certificate does not verify: from real handshakes in memory
(OpenSSL's own errors), against certificates a clock a day behind or 40 days ahead would see."""

from __future__ import annotations

import datetime
import ssl
import urllib.error

import httpx2
import pytest
import trustme

from sonde.connect_failures import describe_failure, describe_tls_failure
from tests.ports import free_port

NOW = datetime.datetime.now(datetime.UTC)


def handshake_error(issued: trustme.LeafCert, trusted: trustme.CA) -> ssl.SSLError:
    """The error a client trusting ``trusted`` gets when a server presents ``issued``."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    issued.configure_cert(server_context)
    client_context = ssl.create_default_context()
    trusted.configure_trust(client_context)
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(client_in, client_out, server_hostname="127.0.0.1")
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):  # each side speaks in turn, its bytes carried to the other
        try:
            client.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            return exc
        server_in.write(client_out.read())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client_in.write(server_out.read())
    raise AssertionError("the handshake did not fail")


@pytest.mark.parametrize(
    ("not_before", "not_after", "verify_message"),
    [
        # what a machine whose clock is a day behind sees of a certificate issued an hour ago
        (
            NOW + datetime.timedelta(hours=23),
            NOW + datetime.timedelta(days=90),
            "certificate is not yet valid",
        ),
        # and one 40 days ahead, of a certificate that runs out in 30
        (NOW - datetime.timedelta(days=60), NOW - datetime.timedelta(days=10), "certificate has expired"),
    ],
)
def test_dates_that_do_not_verify_point_at_the_clock(
    not_before: datetime.datetime, not_after: datetime.datetime, verify_message: str
) -> None:
    ca = trustme.CA()
    error = handshake_error(ca.issue_cert("127.0.0.1", not_before=not_before, not_after=not_after), ca)
    said = describe_tls_failure(urllib.error.URLError(error))
    assert said is not None
    assert f"({verify_message})" in said
    assert "this machine's clock" in said
    assert "certificate's dates" in said
    assert "SSL_CERT_FILE" not in said


def test_an_unknown_issuer_still_gets_the_private_ca_advice() -> None:
    error = handshake_error(trustme.CA().issue_cert("127.0.0.1"), trustme.CA())
    said = describe_failure(error)
    assert "SSL_CERT_FILE" in said
    assert "clock" not in said


async def test_a_refused_connection_is_said_in_words_with_its_address() -> None:
    """httpx keeps the ConnectionRefusedError inside an exception group, three causes down."""
    port = free_port()  # nothing listens there
    async with httpx2.AsyncClient() as http:
        with pytest.raises(httpx2.ConnectError) as caught:
            await http.get(f"http://127.0.0.1:{port}/")
    assert describe_failure(caught.value) == (
        f"connection refused: nothing listens at 127.0.0.1:{port} (is the hub running?)"
    )


async def test_a_name_that_does_not_resolve_is_said_in_words() -> None:
    async with httpx2.AsyncClient() as http:
        with pytest.raises(httpx2.ConnectError) as caught:
            await http.get("http://no-such-hub.invalid:3000/")
    assert describe_failure(caught.value).startswith("the hub's host name does not resolve (")


def test_a_connect_timeout_is_said_in_words() -> None:
    said = describe_failure(httpx2.ConnectTimeout(""))
    assert said == "no connection within the time allowed (the host down, or a firewall dropping packets?)"

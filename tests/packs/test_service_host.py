"""The ``host`` parameter of the service packs (redis, postgres, mysql): names, IPv4, IPv6 and socket paths."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from sonde.packs.services import ServiceDefaults, ServiceParams, endpoint

DEFAULTS = ServiceDefaults("127.0.0.1", 6379)


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "db.internal",
        "10.0.0.7",
        "::1",
        "::",
        "fe80::1",
        "2001:db8::42",
        "::ffff:192.0.2.1",
        "2001:0db8:0000:0000:0000:0000:0000:0001",
        "[::1]",
        "[2001:db8::42]",
        "/var/run/postgresql",
    ],
)
def test_a_host_name_address_or_socket_is_accepted(host: str) -> None:
    assert ServiceParams.model_validate({"host": host}).host == host


@pytest.mark.parametrize(
    "host",
    [
        ":::",
        "::1::",
        "1:2:3:4:5:6:7:8:9",
        "::g",
        "localhost:6379",
        "[::1",
        "::1]",
        "[127.0.0.1]",
        "[db.internal]",
        "[]",
        "-x",
        "a b",
        "fe80::1%eth0",
        "x" * 300,
    ],
)
def test_junk_is_refused(host: str) -> None:
    with pytest.raises(ValidationError):
        ServiceParams.model_validate({"host": host})


def test_the_json_schema_pattern_agrees() -> None:
    """A client that checks params against the advertised schema must not refuse "::1" first."""
    pattern = ServiceParams.model_json_schema()["properties"]["host"]["anyOf"][0]["pattern"]
    assert all(re.match(pattern, host) for host in ("::1", "[::1]", "fe80::1", "localhost", "/tmp/x"))
    assert not re.match(pattern, "a b")


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_a_bracketed_address_is_connected_to_without_its_brackets(host: str) -> None:
    """Drivers take "::1" (getaddrinfo does not read "[::1]"); messages write "[::1]:6379"."""
    where = endpoint(ServiceParams(host=host), {"host": "::1", "password": "pw"}, DEFAULTS)
    assert (where.host, where.where(), where.password) == ("::1", "[::1]:6379", "pw")
    assert endpoint(ServiceParams(host="10.0.0.7"), {}, DEFAULTS).where() == "10.0.0.7:6379"

"""What a request refused for its Host or Origin is told (`sonde.hub.mcp_refusals`); the real
hub's answers and log line: tests/e2e/test_mcp_rebinding_answers.py."""

from __future__ import annotations

import logging

import pytest

from sonde.hub.mcp_refusals import RebindingLog, allowed_host_for, rebinding_advice


@pytest.mark.parametrize(
    ("header", "value", "allowed"),
    [
        ("host", "Hub.Example.com", "hub.example.com"),
        ("host", "hub.example.com:8443", "hub.example.com:8443"),
        ("host", "[::1]:3000", "[::1]:3000"),
        ("origin", "https://App.Example:8443", "app.example:8443"),
        ("origin", "null", None),
        ("origin", "file://", None),
        ("host", "", None),
        ("host", "a b; rm -rf /", None),  # never a command to paste
    ],
)
def test_the_allowed_host_that_admits_a_value(header: str, value: str, allowed: str | None) -> None:
    assert allowed_host_for(header, value) == allowed


def test_the_advice_names_the_value_and_the_flag() -> None:
    said = rebinding_advice("host", "hub.example.com")
    assert "the Host header 'hub.example.com' is not a name this hub answers to" in said
    assert "--allowed-host hub.example.com" in said
    assert "(none)" in rebinding_advice("host", "")


def test_the_log_says_it_once_a_minute_per_value_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sonde.hub.asgi")
    said = RebindingLog()
    for _ in range(5):
        said.refused("host", "evil.example", "10.0.0.9", "advice")
    said.refused("host", "other.example", "10.0.0.9", "advice")
    assert [r.getMessage() for r in caplog.records] == [
        "refused an MCP request from 10.0.0.9: advice",
        "refused an MCP request from 10.0.0.9: advice",
    ]

"""What `sonde login` says answered instead of a hub (`sonde.not_a_hub.described_answer`); the
real command against a real web server: tests/bridge/test_login_not_a_hub.py."""

from __future__ import annotations

import pytest

from sonde.not_a_hub import described_answer


@pytest.mark.parametrize(
    ("content_type", "body", "server", "said"),
    [
        (
            "text/html",
            b"<html><head><title>\n  Sign in &amp; more\n</title>",
            None,
            "an HTML page titled 'Sign in & more'",
        ),
        (None, b"<!DOCTYPE html><p>hi</p>", "Apache", "an HTML page (server: Apache)"),
        (
            "application/json",
            b'{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}',
            None,
            "JSON holding the keys 'a', 'b', 'c', 'd', 'e', ...",
        ),
        ("application/json", b"[1, 2]", None, "a JSON array"),
        ("application/problem+json", b"{}", None, "an empty JSON object"),
        ("application/json", b"not json", None, "a body said to be JSON that is not"),
        ("text/plain; charset=utf-8", b"ok", "x\x1b[31m", "a 'text/plain' answer (server: x[31m)"),
        (None, b"", None, "an answer with no Content-Type"),
        (
            "text/html",
            b"<title>sonde_" + b"a" * 30 + b"</title>",
            None,
            "an HTML page titled 'sonde_[hidden]'",
        ),
    ],
)
def test_what_answered_is_said(content_type: str | None, body: bytes, server: str | None, said: str) -> None:
    assert described_answer(content_type, body, server) == said

"""The count of MCP requests being served, per key and hub-wide (`sonde.hub.asgi.McpInFlight`)."""

from __future__ import annotations

from sonde.hub.asgi import McpInFlight, busy_refusal


def test_a_key_past_its_share_is_refused_and_counted_for_nothing() -> None:
    counted = McpInFlight(per_key=2, total=10)
    assert [counted.enter("a") for _ in range(3)] == [None, None, "key"]
    assert counted.enter("b") is None  # another key is served
    assert counted.held("a") == 2
    counted.leave("a")
    assert counted.enter("a") is None


def test_past_the_hub_wide_cap_every_key_waits() -> None:
    counted = McpInFlight(per_key=5, total=3)
    assert [counted.enter(key) for key in ("a", "b", "c", "d")] == [None, None, None, "hub"]
    status, body = busy_refusal("hub", counted)
    assert status == 503
    assert "serving 3 MCP requests" in body["error"]["message"]
    for key in ("a", "b", "c"):
        counted.leave(key)
    assert counted.held("a") == 0
    assert counted.enter("d") is None


def test_a_key_refusal_is_a_429() -> None:
    status, body = busy_refusal("key", McpInFlight(per_key=256))
    assert status == 429
    assert body["error"]["code"] == "too_many_requests"

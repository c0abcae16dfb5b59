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
    counted = McpInFlight(per_key=5, total=3, admin_reserve=0)
    assert [counted.enter(key) for key in ("a", "b", "c", "d")] == [None, None, None, "hub"]
    status, word, message = busy_refusal("hub", counted)
    assert (status, word) == (503, "busy")
    assert "serving 3 MCP requests or more" in message
    for key in ("a", "b", "c"):
        counted.leave(key)
    assert counted.held("a") == 0
    assert counted.enter("d") is None


def test_a_key_refusal_is_a_429() -> None:
    status, word, _ = busy_refusal("key", McpInFlight(per_key=256))
    assert (status, word) == (429, "too_many_requests")


def test_member_keys_filling_the_hub_leave_its_last_places_to_admin_keys() -> None:
    # four member keys at their own cap (clients that ask and never read): the admin still gets in
    counted = McpInFlight(per_key=256, total=1024, admin_reserve=128)
    for member in ("m1", "m2", "m3", "m4"):
        assert [counted.enter(member) for _ in range(256)].count(None) == (256 if member != "m4" else 128)
    assert counted.enter("m5") == "hub"
    assert counted.enter("admin", admin=True) is None
    status, _, message = busy_refusal("hub", counted)
    assert status == 503
    assert "its last 128 places are kept for admin keys" in message
    assert [counted.enter("admin", admin=True) for _ in range(128)].count(None) == 127  # to the hub's cap

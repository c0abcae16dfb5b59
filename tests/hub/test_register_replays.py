"""Register nonces: refused when replayed, and one agent cannot fill the cache all agents share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sonde.hub.register_replays import RegisterReplays
from sonde.protocol.errors import SignatureError
from sonde.protocol.signing import StaleFrame

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_nonce_is_refused_the_second_time_from_the_same_agent_only() -> None:
    replays = RegisterReplays()
    replays.check("a1", "n1", NOW, NOW)
    with pytest.raises(SignatureError) as refused:
        replays.check("a1", "n1", NOW, NOW)
    assert refused.value.code == "replayed"
    replays.check("a2", "n1", NOW, NOW)  # another agent's nonce, though the same text


def test_an_agent_registering_in_a_loop_shuts_out_only_itself() -> None:
    replays = RegisterReplays(per_agent=5, max_nonces=12)
    for n in range(5):
        replays.check("loop", f"n{n}", NOW, NOW)
    with pytest.raises(SignatureError) as refused:
        replays.check("loop", "n5", NOW, NOW)
    assert refused.value.code == "replay_cache_full"
    assert "more than 5 registers in 120 s" in refused.value.message
    for agent in ("b", "c"):  # the others still get in, up to the hub-wide bound
        for n in range(3):
            replays.check(agent, f"n{n}", NOW, NOW)
    later = NOW + timedelta(seconds=121)  # its nonces leave the window: in again
    replays.check("loop", "n6", later, later)


def test_the_hub_wide_bound_still_holds() -> None:
    replays = RegisterReplays(per_agent=5, max_nonces=8)
    for agent in ("a", "b"):
        for n in range(4):
            replays.check(agent, f"n{n}", NOW, NOW)
    with pytest.raises(SignatureError) as refused:
        replays.check("c", "n0", NOW, NOW)
    assert refused.value.code == "replay_cache_full"


def test_a_register_outside_the_window_is_stale() -> None:
    with pytest.raises(StaleFrame):
        RegisterReplays().check("a1", "n1", NOW - timedelta(seconds=121), NOW)

"""`Throttled`: one log line a minute per subject, and a bounded memory of subjects."""

from __future__ import annotations

from sonde.hub.logs import Throttled


def test_the_first_event_is_said_then_none_until_the_minute_is_out() -> None:
    said = Throttled()
    assert said.due("10.0.0.1 bad_signature") == 1
    assert said.due("10.0.0.1 bad_signature") is None
    assert said.due("10.0.0.2 bad_signature") == 1  # another subject
    said.every_s = 0.0  # the minute is out: the line counts the events since the last
    assert said.due("10.0.0.1 bad_signature") == 2


def test_subjects_past_the_bound_forget_the_oldest() -> None:
    said = Throttled(max_subjects=3)
    for n in range(5):
        assert said.due(f"10.0.0.{n}") == 1
    assert said.due("10.0.0.4") is None  # remembered
    assert said.due("10.0.0.0") == 1  # forgotten, so said again
    assert len(said._said_at) == 3

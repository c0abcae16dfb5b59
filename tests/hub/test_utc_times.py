"""The hub's two ways of writing a time."""

from __future__ import annotations

from sonde.hub.utc_times import iso_utc, utc_text


def test_iso_utc_is_what_programs_read() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(1_764_140_886.9) == "2025-11-26T07:08:06Z"  # to the second, not rounded


def test_utc_text_is_what_people_read() -> None:
    assert utc_text(1_764_140_886.9) == "2025-11-26 07:08:06Z"

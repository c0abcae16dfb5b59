"""The audit filters as people type them, read once for `sonde hub audit list` and for
``GET /api/v1/audit``: a duration ago or an ISO 8601 time, and an API key by id or name; REST also
keeps reading a plain number as unix seconds.

Before, REST took ``since``/``until`` as unix seconds only (``since=2h`` was refused as "Input
should be a valid number") and ``key`` as an id only (a name matched nothing)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from sonde.hub.audit_filters import AmbiguousKeyName, KeyActor, actor_of, time_ago_or_at
from sonde.hub.db import open_database
from sonde.hub.keys import create_api_key
from sonde.hub.rest_audit import AuditFilters
from sonde.params_words import describe_params_error

NOW = 1_769_850_900.0  # 2026-01-31T09:15:00Z


@pytest.mark.parametrize(
    ("text", "unix_s"),
    [
        ("2h", NOW - 7200),
        (" 30m ", NOW - 1800),
        ("7d", NOW - 7 * 86400),
        ("1.5h", NOW - 5400),
        ("2026-01-31T09:15:00Z", NOW),
        ("2026-01-31T10:15:00+01:00", NOW),
    ],
)
def test_a_duration_ago_or_an_iso_time_is_the_unix_time_it_names(text: str, unix_s: float) -> None:
    assert time_ago_or_at(text, NOW, "FORMS") == unix_s


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("yesterday", "'yesterday' is neither a duration nor a time: give FORMS"),
        ("2026-13-45", "'2026-13-45' is neither a duration nor a time: give FORMS"),
        ("-2h", "invalid duration '-2h': a duration cannot be negative"),
    ],
)
def test_anything_else_is_refused_naming_the_forms(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        time_ago_or_at(text, NOW, "FORMS")


def rest_filters(**query: str) -> AuditFilters:
    return AuditFilters.model_validate(query)


def rest_refusal(**query: str) -> str:
    with pytest.raises(ValidationError) as refused:
        rest_filters(**query)
    return describe_params_error(refused.value)


def test_rest_reads_a_plain_number_as_unix_seconds_as_before() -> None:
    assert rest_filters(since="1764000000", until="1764000000.5").since == 1_764_000_000.0
    assert rest_filters(until="1764000000.5").until == 1_764_000_000.5
    assert "less than or equal to 253402300799" in rest_refusal(since="1764000000000")  # milliseconds
    assert "greater than or equal to 0" in rest_refusal(since="-1")
    assert "finite number" in rest_refusal(until="inf")


def test_rest_reads_a_duration_ago_and_an_iso_time_as_the_cli_does() -> None:
    before = time.time()
    since = rest_filters(since="2h").since
    assert since is not None
    assert before - 7200 <= since <= time.time() - 7200
    assert rest_filters(until="2026-01-31T09:15:00Z").until == NOW
    assert rest_filters(since="2026-01-31T10:15:00+01:00").since == NOW


def test_rest_refuses_a_bad_moment_naming_its_three_forms() -> None:
    said = rest_refusal(since="yesterday")
    assert said == (
        "since: 'yesterday' is neither a duration nor a time: give unix seconds (1767225600), "
        "a duration ago (90s, 15m, 2h, 7d) or a time (2026-01-31T09:15:00Z)"
    )
    assert rest_refusal(until="-2h") == "until: invalid duration '-2h': a duration cannot be negative"


def test_an_empty_range_is_refused_as_it_was_given() -> None:
    assert "since (2h) must come before until (3h): the range holds no time" in rest_refusal(
        since="2h", until="3h"
    )
    assert "since (2) must come before until (1)" in rest_refusal(since="2", until="1")


def test_both_bounds_read_one_clock() -> None:
    """``since=5m&until=5m`` is no range of a few microseconds, as when each bound read the clock."""
    with pytest.raises(ValidationError) as refused:
        AuditFilters.model_validate({"since": "5m", "until": "5m"}, context={"now": NOW})
    assert "since (5m) must come before until (5m)" in describe_params_error(refused.value)
    at_now = AuditFilters.model_validate({"since": "5m", "until": "1m"}, context={"now": NOW})
    assert (at_now.since, at_now.until) == (NOW - 300, NOW - 60)


def test_a_key_is_found_by_its_id_or_its_only_name(tmp_path: Path) -> None:
    db = open_database(tmp_path / "sonde.db")
    try:
        ops, _ = create_api_key(db, "ops")
        twins = [create_api_key(db, "twin")[0] for _ in range(2)]
        assert actor_of(db, ops.id) == KeyActor(ops.id, known=True)
        assert actor_of(db, "ops") == KeyActor(ops.id, known=True, named=True)
        assert actor_of(db, "hub") == KeyActor("hub", known=True)  # an actor that is no key: as given
        assert actor_of(db, "nobody") == KeyActor("nobody", known=False)
        db.execute(
            "UPDATE api_keys SET name = 'cli' WHERE id = ?", [ops.id]
        )  # named before names were checked
        assert actor_of(db, "cli") == KeyActor("cli", known=True)  # the CLI; that key by its id
        with pytest.raises(ValueError, match="an API key may not be named 'CLI'"):
            create_api_key(db, "CLI")
        with pytest.raises(AmbiguousKeyName) as refused:
            actor_of(db, "twin")
        assert str(refused.value) == f"2 keys are named 'twin': give one's id ({twins[0].id}, {twins[1].id})"
    finally:
        db.close()

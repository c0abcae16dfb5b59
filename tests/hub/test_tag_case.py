"""An agent's tags are matched without regard to case, so they are stored once whatever their case."""

from __future__ import annotations

from sonde.hub.agent_records import normalize_tags
from sonde.hub.policy import has_tags


def test_tags_differing_only_in_case_are_kept_once_in_their_first_spelling() -> None:
    tags = normalize_tags(["Prod", "prod", "#PROD", " web ", "WEB", "db:Primary", "DB:primary"])
    assert tags == ["Prod", "web", "db:Primary"]
    assert has_tags(tags, ["prod", "Web", "#DB:PRIMARY"])

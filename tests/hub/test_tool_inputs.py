"""Tool inputs refuse what would silently widen a call: a tag filter that matches every agent."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sonde.hub.tools.agents import ListAgentsInput
from sonde.hub.tools.capabilities import CapabilitiesInput
from sonde.hub.tools.health import HealthCheckInput

MODELS = [ListAgentsInput, CapabilitiesInput, HealthCheckInput]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("tag", ["", "#", "  ", "# ", "x" * 66])
def test_a_tag_that_would_match_every_agent_is_refused(model: type, tag: str) -> None:
    with pytest.raises(ValidationError):
        model.model_validate({"tags": [tag]})


@pytest.mark.parametrize("model", MODELS)
def test_tags_with_and_without_hash_are_accepted(model: type) -> None:
    assert model.model_validate({"tags": ["#prod", "web"]}).tags == ["#prod", "web"]

"""What a caller is told of an agent name the hub does not know (`resolve_agent`): every name it can
reach when they are few; of a fleet, how many, the closest names and how to find one.

Regression (3,000 agents): the refusal listed the first 20 names by name, so a typo of
'bench-01234' was answered with bench-00000 ... bench-00019, no total and no way on."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonde.hub.agent_records import AgentRecord
from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.errors import HubError
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.probing import resolve_agent

ADMIN = caller_for(ApiKeyRecord(id="k-admin", name="admin", prefix="sonde_x", role="admin", created_at=0.0))


def refusal_of(hub: object, name: str) -> str:
    with pytest.raises(HubError) as refused:
        resolve_agent(hub, ADMIN, name)  # type: ignore[arg-type]
    assert refused.value.code == "not_found"
    return refused.value.message


async def test_a_typo_in_a_fleet_is_answered_with_the_count_and_the_closest_names(tmp_path: Path) -> None:
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        for name in ("web-1", "db-1"):
            hub.fleet.remember(AgentRecord(name=name, public_key="k", enrolled_at=0.0))
        assert refusal_of(hub, "web-2") == (
            "Unknown agent 'web-2'. Agents you can reach: db-1, web-1. Call list_agents for details."
        )
        for i in range(3000):
            hub.fleet.remember(AgentRecord(name=f"bench-{i:05d}", public_key="k", enrolled_at=0.0))
        said = refusal_of(hub, "bench-1234")
        assert said.startswith(
            "Unknown agent 'bench-1234'. You can reach 3002 agents; the closest names: "
        ), said
        closest = said.split("the closest names: ")[1].split(". ")[0].split(", ")
        assert "bench-01234" in closest
        assert 1 <= len(closest) <= 5
        assert said.endswith("Call list_agents with name (a glob, such as 'ben*') to find the one you mean.")

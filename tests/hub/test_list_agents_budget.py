"""list_agents' answer fits a model's context whatever limit it asks (`LIST_BUDGET_BYTES`).

Regression (3,000 agents): `list_agents {limit: 1000}` answered 312,099 characters (some 78,000
tokens, doubled by the structured copy), past what clients take from a tool."""

from __future__ import annotations

from pathlib import Path

from sonde.hub.agent_records import AgentRecord
from sonde.hub.auth import caller_for
from sonde.hub.config import HubConfig
from sonde.hub.core import open_hub
from sonde.hub.keys import ApiKeyRecord
from sonde.hub.tools.agents import ListAgentsInput, list_agents
from sonde.hub.tools.base import LIST_BUDGET_BYTES, ToolCall

ADMIN = caller_for(ApiKeyRecord(id="k-admin", name="admin", prefix="sonde_x", role="admin", created_at=0.0))
PACKS = [{"name": f"pack{n}", "version": "1.2.3", "probes": []} for n in range(6)]


async def test_a_large_limit_is_cut_to_the_budget_and_says_so(tmp_path: Path) -> None:
    async with open_hub(HubConfig(data_dir=tmp_path)) as hub:
        for i in range(1000):
            record = AgentRecord(
                name=f"web-{i:04d}", public_key="k", enrolled_at=0.0, packs=PACKS, tags=["prod"]
            )
            hub.fleet.remember(record)
        answer = await list_agents(ToolCall(hub, ADMIN), ListAgentsInput(limit=1000))
        assert answer.matched == answer.total == 1000
        assert answer.truncated
        assert 100 < len(answer.agents) < 1000
        assert [a.name for a in answer.agents] == [f"web-{i:04d}" for i in range(len(answer.agents))]
        assert len(answer.model_dump_json()) <= LIST_BUDGET_BYTES + 1024
        few = await list_agents(ToolCall(hub, ADMIN), ListAgentsInput(limit=10))
        assert (len(few.agents), few.truncated) == (10, True)
        whole = await list_agents(ToolCall(hub, ADMIN), ListAgentsInput(name="web-000*"))
        assert (len(whole.agents), whole.truncated) == (10, False)

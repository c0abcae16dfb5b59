"""Agent listing tools."""

from __future__ import annotations

from typing import Annotated

from sonde.hub.tools.base import TAGS_FIELD, ToolCall, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import AgentSummary, summarize, visible_agents


class ListAgentsInput(ToolInput):
    tags: Annotated[list[str], TAGS_FIELD]


class ListAgentsOutput(ToolOutput):
    agents: list[AgentSummary]
    online: int
    total: int


LIST_AGENTS = """List the agents (machines) you can reach: id, name, status (online / offline / degraded),
last seen, OS, agent version, packs and tags. Use it to find agent names for probe, diagnose
and agent_overview, or to see which machines are offline."""


async def list_agents(call: ToolCall, args: ListAgentsInput) -> ListAgentsOutput:
    summaries = [summarize(call.hub, r) for r in visible_agents(call.hub, call.caller, args.tags)]
    online = sum(1 for s in summaries if s.status == "online")
    return ListAgentsOutput(agents=summaries, online=online, total=len(summaries))


TOOLS = [ToolSpec("list_agents", LIST_AGENTS, ListAgentsInput, ListAgentsOutput, list_agents)]

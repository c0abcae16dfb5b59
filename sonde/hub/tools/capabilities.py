"""`list_capabilities`: what every reachable agent can be asked, so a model never guesses."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from sonde.hub.auth import Caller
from sonde.hub.diagnostics import describe_categories
from sonde.hub.probing import visible_agents
from sonde.hub.tools.base import TAGS_FIELD, TagQuery, ToolCall, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import runnable_categories


class PackOut(BaseModel):
    name: str
    version: str
    probes: list[str]


class AgentCapabilities(BaseModel):
    agent: str
    status: str
    packs: list[PackOut]
    categories: list[str]


class ProbeInfo(BaseModel):
    name: str
    description: str
    params_schema: dict[str, Any]


class CategoryInfo(BaseModel):
    category: str
    description: str


DEFAULT_AGENTS_SHOWN = 25


class CapabilitiesInput(ToolInput):
    tags: Annotated[list[TagQuery], TAGS_FIELD]
    limit: int = Field(
        default=DEFAULT_AGENTS_SHOWN,
        ge=1,
        le=1000,
        description="At most this many agents in 'agents' (by name); probes and categories cover all of them.",
    )


class CapabilitiesOutput(ToolOutput):
    agents: list[AgentCapabilities]
    probes: list[ProbeInfo]
    categories: list[CategoryInfo]
    matched: int = Field(description="Agents you can reach (within tags); 'agents' holds the first 'limit'.")
    truncated: bool = Field(description="True when more agents matched than 'limit'.")


LIST_CAPABILITIES = f"""Discover what you can ask: every agent you can reach with its status, packs
(with versions), the probe names and diagnostic categories your key can run; then each probe ONCE
with its description and parameter JSON schema, and each category with what it checks. Call it
before probe or diagnose whenever you are not sure of a probe or category name. On a large fleet
'agents' shows the first 'limit' (default {DEFAULT_AGENTS_SHOWN}) by name; the probes and categories
cover every agent."""


async def list_capabilities(call: ToolCall, args: CapabilitiesInput) -> CapabilitiesOutput:
    hub, caller = call.hub, call.caller
    records = visible_agents(hub, caller, args.tags)
    catalogue: dict[str, ProbeInfo] = {}
    # Agents share their packs' descriptions (`sonde.hub.shared_packs`): each is looked at once,
    # not once per agent (10,000 agents took 1.6 s of the event loop), and by its identity, which
    # stays its own while ``records`` holds it.
    pack_views: dict[int, PackOut] = {}
    category_views: dict[tuple[int, ...], list[str]] = {}
    agents: list[AgentCapabilities] = []
    used_categories: set[str] = set()
    for record in records:
        packs = []
        for pack in record.packs:
            view = pack_views.get(id(pack))
            if view is None:
                view = pack_views[id(pack)] = describe_pack(pack, caller, catalogue)
            packs.append(view)
        shared = tuple(id(pack) for pack in record.packs)  # its packs, at their versions
        categories = category_views.get(shared)
        if categories is None:
            categories = category_views[shared] = runnable_categories(hub, caller, record)
            used_categories.update(categories)
        if len(agents) < args.limit:
            status = hub.fleet.status(record.id)
            agents.append(
                AgentCapabilities(agent=record.name, status=status, packs=packs, categories=categories)
            )
    descriptions = describe_categories(hub)
    return CapabilitiesOutput(
        agents=agents,
        matched=len(records),
        truncated=len(records) > args.limit,
        probes=sorted(catalogue.values(), key=lambda p: p.name),
        categories=[
            CategoryInfo(category=c, description=descriptions.get(c, "")) for c in sorted(used_categories)
        ],
    )


def describe_pack(pack: dict[str, Any], caller: Caller, catalogue: dict[str, ProbeInfo]) -> PackOut:
    """``pack`` as an agent's entry shows it (the probes ``caller`` may run), each of those
    probes added to ``catalogue`` unless an earlier agent's pack described it."""
    allowed = [probe for probe in pack.get("probes", []) if caller.allows_probe(probe["name"])]
    for probe in allowed:
        if probe["name"] not in catalogue:
            catalogue[probe["name"]] = ProbeInfo(
                name=probe["name"], description=probe["description"], params_schema=probe["paramsSchema"]
            )
    return PackOut(name=pack["name"], version=pack["version"], probes=[probe["name"] for probe in allowed])


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("list_capabilities", LIST_CAPABILITIES, CapabilitiesInput, CapabilitiesOutput, list_capabilities)
]

"""The `probe` tool: one reading from one agent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, JsonValue

from sonde.hub.probing import probe_deadline_s, resolve_agent, run_probe_for
from sonde.hub.tools.base import (
    AGENT_FIELD,
    AgentWait,
    DurationMs,
    ToolCall,
    ToolInput,
    ToolOutput,
    ToolSpec,
)
from sonde.protocol.names import PROBE_NAME_PATTERN

if TYPE_CHECKING:
    from sonde.hub.core import Hub

# Probe names are a pack, an area and a metric ('postgres.queries.long_running': 29 characters);
# a longer one is no probe, and the refusal must not echo a megabyte back.
MAX_PROBE_NAME_CHARS = 128


class ProbeInput(ToolInput):
    agent: Annotated[str, AGENT_FIELD]
    probe: Annotated[
        str,
        Field(
            max_length=MAX_PROBE_NAME_CHARS,
            pattern=PROBE_NAME_PATTERN,
            description="Probe name like 'system.memory.usage'. Take it from list_capabilities; never guess.",
        ),
    ]
    params: dict[str, JsonValue] = Field(
        default_factory=dict,
        description='The probe\'s parameters, as its schema says: list_capabilities(probes=["<probe>"]).',
    )


class ProbeOutput(ToolOutput):
    agent: str
    agent_id: str
    probe: str
    result: dict[str, JsonValue]
    duration_ms: DurationMs
    truncated: bool
    redactions: int


DESCRIPTION = """Run ONE read-only probe on ONE agent and return its structured reading.
Use it for a specific measurement, or to follow up on a finding from health_check or diagnose.
Probe names come from list_capabilities: never guess one. A probe's parameter schema comes from
list_capabilities(probes=["<probe>"]).
Example: agent="web-1", probe="system.memory.usage", params={}."""


async def run_probe(call: ToolCall, args: ProbeInput) -> ProbeOutput:
    record = resolve_agent(call.hub, call.caller, args.agent)
    reading = await run_probe_for(call.hub, call.caller, record, args.probe, dict(args.params))
    return ProbeOutput(**reading.__dict__)


def probe_wait(hub: Hub, args: ProbeInput) -> AgentWait:
    return AgentWait(f"{args.agent}: {args.probe}", probe_deadline_s(hub, args.probe))


TOOLS: list[ToolSpec[Any, Any]] = [
    ToolSpec("probe", DESCRIPTION, ProbeInput, ProbeOutput, run_probe, waits_on_agents=probe_wait)
]

"""The `probe` tool: one reading from one agent."""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import Field, JsonValue, ValidationError

from sonde.hub.tools.base import AGENT_FIELD, ToolCall, ToolError, ToolInput, ToolOutput, ToolSpec
from sonde.hub.tools.views import probe_names, resolve_agent
from sonde.packs.executor import describe_params_error
from sonde.protocol.errors import AgentUnavailable, ProbeFailed, ProbeTimeout
from sonde.protocol.messages import PROBE_NAME_PATTERN


class ProbeInput(ToolInput):
    agent: Annotated[str, AGENT_FIELD]
    probe: Annotated[
        str,
        Field(
            pattern=PROBE_NAME_PATTERN,
            description="Probe name like 'system.memory.usage'. Take it from list_capabilities; never guess.",
        ),
    ]
    params: dict[str, JsonValue] = Field(
        default_factory=dict, description="The probe's parameters, as its schema in list_capabilities says."
    )


class ProbeOutput(ToolOutput):
    agent: str
    agent_id: str
    probe: str
    result: dict[str, JsonValue]
    duration_ms: float
    truncated: bool
    redactions: int


DESCRIPTION = """Run ONE read-only probe on ONE agent and return its structured reading.
Use it for a specific measurement, or to follow up on a finding from health_check or diagnose.
Probe names and their parameters come from list_capabilities: never guess a probe name.
Example: agent="web-1", probe="system.memory.usage", params={}."""


def check_params(call: ToolCall, probe: str, params: dict[str, Any]) -> None:
    spec = call.hub.packs.probe(probe)
    if spec is None:
        return  # a pack the hub does not have: the agent validates
    try:
        spec.params.model_validate(params)
    except ValidationError as exc:
        raise ToolError(
            f"Invalid params for {probe}: {describe_params_error(exc)}. "
            f"Its parameter schema is in list_capabilities."
        ) from None


async def run_probe(call: ToolCall, args: ProbeInput) -> ProbeOutput:
    hub, caller = call.hub, call.caller
    record = resolve_agent(hub, caller, args.agent)
    available = probe_names(record)
    if args.probe not in available:
        raise ToolError(
            f"Unknown probe {args.probe!r} on agent {record.name}. "
            f"Available: {', '.join(available) or 'none'}. Call list_capabilities for their parameters."
        )
    if not caller.allows_probe(args.probe):
        raise ToolError(
            f"Your API key's policy does not allow probe {args.probe!r} ({caller.policy.describe()})."
        )
    check_params(call, args.probe, dict(args.params))
    if hub.fleet.status(record.id) == "degraded":
        raise ToolError(
            f"Agent {record.name} is held as degraded: its attestation changed. "
            "An admin must accept it (`sonde hub agent accept NAME`) before it runs probes."
        )
    started = time.perf_counter()
    outcome, detail = "ok", ""
    try:
        response = await hub.fleet.run_probe(
            record.id, args.probe, dict(args.params), hub.config.probe_timeout_s
        )
    except (AgentUnavailable, ProbeTimeout) as exc:
        outcome, detail = "error", str(exc)
        raise ToolError(f"{exc}. Check list_agents for its status, or try another agent.") from None
    except ProbeFailed as exc:
        outcome, detail = "error", f"{exc.code}: {exc.message}"
        raise ToolError(f"Probe {args.probe} failed on {record.name} ({exc.code}): {exc.message}") from None
    finally:
        await hub.audit(
            caller.key_id,
            "mcp.probe",
            record.name,
            outcome,
            duration_ms=(time.perf_counter() - started) * 1000,
            detail={"agentId": record.id, "probe": args.probe, "params": dict(args.params), "error": detail},
        )
    payload = response.payload
    return ProbeOutput(
        agent=record.name,
        agent_id=record.id,
        probe=args.probe,
        result=payload.result,
        duration_ms=payload.duration_ms,
        truncated=payload.meta.truncated,
        redactions=payload.meta.redactions,
    )


TOOLS = [ToolSpec("probe", DESCRIPTION, ProbeInput, ProbeOutput, run_probe)]

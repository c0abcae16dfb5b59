"""The seven MCP tools, one module per job; `all_tools()` lists them in order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sonde.hub.tools.base import ToolSpec

if TYPE_CHECKING:
    from sonde.hub.core import Hub


def all_tools() -> list[ToolSpec[Any, Any]]:
    from sonde.hub.tools import agents, capabilities, diagnose, health, logs, probe

    return [
        *health.TOOLS,
        *capabilities.TOOLS,
        *diagnose.TOOLS,
        *probe.TOOLS,
        *agents.TOOLS,
        *logs.TOOLS,
    ]


def agent_waiting_calls(hub: Hub, specs: Iterable[ToolSpec[Any, Any]]) -> Callable[[str, Any], bool]:
    """Whether a ``tools/call`` of a tool with these arguments (as the request has them) waits
    on agents: `ToolSpec.agent_wait`, as the call's handler sees it once they are validated."""
    waiting = {spec.name: spec for spec in specs if spec.waits_on_agents is not None}

    def waits(tool: str, arguments: Any) -> bool:
        spec = waiting.get(tool)
        if spec is None or not isinstance(arguments, Mapping | None):
            return False
        return spec.agent_wait(hub, arguments or {}) is not None

    return waits

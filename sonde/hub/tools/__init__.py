"""The seven MCP tools, one module per job; `all_tools()` lists them in order."""

from __future__ import annotations

from typing import Any

from sonde.hub.tools.base import ToolSpec


def all_tools() -> list[ToolSpec[Any, Any]]:
    from sonde.hub.tools import agents, capabilities, health, logs, probe

    return [
        *health.TOOLS[:1],
        *capabilities.TOOLS,
        *health.TOOLS[1:],
        *probe.TOOLS,
        *agents.TOOLS,
        *logs.TOOLS,
    ]

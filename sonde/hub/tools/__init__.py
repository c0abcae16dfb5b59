"""The seven MCP tools, one module per job; `all_tools()` lists them in order."""

from __future__ import annotations

from typing import Any

from sonde.hub.tools.base import ToolSpec


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

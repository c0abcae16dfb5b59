"""The MCP tools, one module per job; `all_tools()` lists them in order."""

from __future__ import annotations

from sonde.hub.tools.base import ToolSpec


def all_tools() -> list[ToolSpec]:
    from sonde.hub.tools import agents, probe

    return [*probe.TOOLS, *agents.TOOLS]

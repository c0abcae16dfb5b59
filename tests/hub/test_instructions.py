"""The MCP server's instructions name only probes and tools that exist."""

from __future__ import annotations

import re

from sonde.hub.mcp_server import INSTRUCTIONS
from sonde.hub.tools import all_tools
from sonde.packs.registry import load_packs

TOOL_NAMES = {
    "health_check",
    "list_capabilities",
    "diagnose",
    "probe",
    "list_agents",
    "agent_overview",
    "query_logs",
}


def test_the_seven_tools_of_seed_000_exist() -> None:
    assert {tool.name for tool in all_tools()} == TOOL_NAMES


def test_every_probe_named_in_the_instructions_exists() -> None:
    named = set(re.findall(r"\b[a-z]+\.[a-z_]+\.[a-z_]+\b", INSTRUCTIONS))
    assert named, "the instructions should show real probe names as examples"
    known = set(load_packs().probe_names())
    assert named <= known, named - known


def test_instructions_give_the_workflow() -> None:
    for tool in TOOL_NAMES:
        assert tool in INSTRUCTIONS
    assert "Never guess a probe name" in INSTRUCTIONS
    assert "'#'" in INSTRUCTIONS


def test_every_tool_is_read_only_with_schemas() -> None:
    for tool in all_tools():
        assert len(tool.description) > 100, tool.name
        assert tool.input_schema()["additionalProperties"] is False
        assert tool.output_schema()["type"] == "object"


def test_every_text_that_sends_a_model_for_parameters_names_the_call_that_answers_them() -> None:
    """list_capabilities without 'probes' gives no schema: 'the schema is in list_capabilities' sent
    a model to an answer without it."""
    probe = next(tool for tool in all_tools() if tool.name == "probe")
    capabilities = next(tool for tool in all_tools() if tool.name == "list_capabilities")
    texts = {
        "instructions": INSTRUCTIONS,
        "probe": probe.description,
        "probe.params": probe.input_schema()["properties"]["params"]["description"],
        "list_capabilities": capabilities.description,
    }
    for where, text in texts.items():
        assert "list_capabilities(probes=[" in text, where

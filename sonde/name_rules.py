"""An agent name's rule in words: one message for every command that refuses a name
(`sonde enroll --name`, `sonde hub token create --name`), so they all say the same."""

from __future__ import annotations

from sonde.echo import echoed

AGENT_NAME_RULE = "1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def invalid_agent_name(name: str) -> str:
    """Why ``name`` (which `NAME_PATTERN` refused) is no agent name, and what one looks like."""
    return f"invalid agent name {echoed(name)}: an agent name is {AGENT_NAME_RULE}"

"""An agent name's rule in words: one message for every command that refuses a name
(`sonde enroll --name`, `sonde hub token create --name`), so they all say the same; and the
rule every name a person gives (an agent's, an API key's) keeps: no secret's shape."""

from __future__ import annotations

from sonde.echo import echoed, holds_secret
from sonde.protocol.names import NAME_RULE, SECRET_SHAPED


def invalid_agent_name(name: str) -> str:
    """Why ``name`` (which `NAME_PATTERN` refused) is no agent name, and what one looks like."""
    return f"invalid agent name {echoed(name)}: an agent name is {NAME_RULE}"


def secret_shaped(what: str, name: str) -> str | None:
    """Why ``name`` may not be a name (``what``: "agent name", "API key name"), or None when it may."""
    return f"this {what} {SECRET_SHAPED}" if holds_secret(name) else None

"""An agent name's rule in words: one message for every command that refuses a name
(`sonde enroll --name`, `sonde hub token create --name`), so they all say the same; and the
rule every name a person gives (an agent's, an API key's) keeps: no secret's shape."""

from __future__ import annotations

from sonde.echo import echoed, holds_secret
from sonde.protocol.names import NAME_RULE

AGENT_NAME_RULE = NAME_RULE
# A name is stored and shown in the clear (lists, the dashboard, a model's answers, backups): a key
# pasted as one would be too, where the key itself is kept only as a hash.
SECRET_SHAPED = (
    "has the shape of a Sonde API key or enrollment token (sonde_ or enr_, then 20 or more letters, "
    "digits, '_' or '-'): a name is stored and shown in the clear, a secret never is; choose another name"
)


def invalid_agent_name(name: str) -> str:
    """Why ``name`` (which `NAME_PATTERN` refused) is no agent name, and what one looks like."""
    return f"invalid agent name {echoed(name)}: an agent name is {AGENT_NAME_RULE}"


def secret_shaped(what: str, name: str) -> str | None:
    """Why ``name`` may not be a name (``what``: "agent name", "API key name"), or None when it may."""
    return f"this {what} {SECRET_SHAPED}" if holds_secret(name) else None


def refuse_secret_shape(name: str | None) -> str | None:
    """``name``, unless it has a secret's shape: ValueError (a pydantic validator's)."""
    if name is not None and holds_secret(name):
        raise ValueError(f"a name that {SECRET_SHAPED}")
    return name

"""What the hub's refusal to read this agent's register says about the two Sonde versions.

A hub that cannot parse a register (a field it does not know: it is older than this agent;
a protocol version outside its range) cannot echo the register's nonce and agent id, so its
``hub.reject`` is unbound: the agent does not obey it (anyone on the path could hand on one
made for another connection) and keeps retrying with its backoff. It is still worth words
an operator can act on: which side to upgrade. `unread_register_advice` gives them.
"""

from __future__ import annotations

from sonde import __version__
from sonde.protocol.messages import PROTOCOL_VERSION, RejectPayload

HUB_OLDER = (
    "the hub likely runs an older Sonde than this agent ({version}): upgrade the hub, "
    "or install this agent's Sonde version on it"
)
HUB_NEWER = (
    "the hub likely runs a newer Sonde than this agent ({version}): upgrade this agent to the hub's version"
)
EITHER = "if the hub runs another Sonde version than this agent ({version}), install the same version on both"
UNHEEDED = "retrying (the reject does not echo this register, so it is only logged)"


def unread_register_advice(rejected: RejectPayload) -> str | None:
    """Words for an unbound reject saying the hub could not read this agent's register
    (``protocol_error``, ``unsupported_version``); None for any other code."""
    said = f"({rejected.code}: {rejected.reason})"
    if rejected.code == "protocol_error":
        advice = frame_advice(rejected.reason)
        return f"the hub refused this agent's register as a frame it cannot read {said}: {advice}; {UNHEEDED}"
    if rejected.code == "unsupported_version":
        advice = version_advice(rejected)
        return f"the hub refused this agent's protocol version {said}: {advice}; {UNHEEDED}"
    return None


def frame_advice(reason: str) -> str:
    """Which side is likely older, by what the hub's parser said of the register."""
    if reason.startswith(("unknown field", "unknown message type")):  # sent what the hub does not know
        return HUB_OLDER.format(version=__version__)
    if reason.startswith("missing field"):  # the hub wants what this agent does not send
        return HUB_NEWER.format(version=__version__)
    return EITHER.format(version=__version__)


def version_advice(rejected: RejectPayload) -> str:
    """Which side is older, by the protocol versions the hub said it speaks."""
    spoken = rejected.supported_versions
    if spoken is None or spoken.min <= PROTOCOL_VERSION <= spoken.max:
        return EITHER.format(version=__version__)
    heard = f"the hub speaks protocol {spoken.min}..{spoken.max}, this agent {PROTOCOL_VERSION}"
    if PROTOCOL_VERSION > spoken.max:
        return f"{heard}: {HUB_OLDER.format(version=__version__)}"
    return f"{heard}: {HUB_NEWER.format(version=__version__)}"

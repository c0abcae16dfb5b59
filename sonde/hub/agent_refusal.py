"""Refusing an agent connection: the ``hub.reject``, the log line, the audit row.

A refusal names the agent when the hub knows which one it is about: the enrolled agent a
checked register came from, or, unchecked, the id a register *claims* when its signature
cannot be checked (a removed agent: no key kept; a frame that does not parse, from an agent
newer than this hub most often: nothing to check). A claimed id is recorded as claimed,
never as the agent's word, and the reject stays unbound (it echoes only a checked register).
The claim of a frame that does not parse names its agent in the log line only: the audit row
has no target and the agent's last refusal is not set (its text would be the frame's).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING

from sonde.hub.client_keys import client_key
from sonde.hub.logs import Throttled
from sonde.protocol.errors import ProtocolError
from sonde.protocol.messages import (
    SUPPORTED_VERSIONS,
    AgentRegister,
    HubReject,
    RejectCode,
    RejectPayload,
    VersionRange,
)
from sonde.transport import CLOSE_POLICY, Transport

if TYPE_CHECKING:
    from sonde.hub.core import Hub
    from sonde.protocol.codec import FrameCodec

log = logging.getLogger("sonde.hub.agent_socket")  # the refusal lines keep the logger they always had
# One line a minute per address, reason and agent: anyone can open sockets and have each refused
# (3,000 lines in 7 s from one client in a review), on the disk the audit log may share.
SAID = Throttled()
# what a claimed id may look like to be named (ids are uuid hex): anything else is not repeated
CLAIMED_ID = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
# parse errors after which the frame is no JSON object worth reading again
UNREADABLE = frozenset({"frame_too_large", "bad_json", "bad_frame"})


class Refused(Exception):
    def __init__(
        self,
        code: RejectCode,
        reason: str,
        agent: str | None = None,
        claimed: str = "",
        revoked_id: bool = False,
        claimed_name: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.agent = agent  # the enrolled agent's name, once the refusal is about one
        self.claimed = claimed  # an id a register gave, unchecked; ``agent``: its name, if any
        self.revoked_id = revoked_id  # ``claimed`` is a revoked agent's id (no key kept to check it)
        # the enrolled agent ``claimed`` names, by a frame that does not parse: said in the log line
        # only, never its refusal's (`Fleet.note_refusal`) nor its audit row's target: anyone who
        # opens a socket could file a refusal, its text the frame's, under any agent's name
        self.claimed_name = claimed_name
        self.register: AgentRegister | None = None  # the register refused, once it parsed

    def reject(self) -> HubReject:
        """The ``hub.reject`` to send: bound to the register it answers when there is one.

        It echoes that register's ``nonce`` and ``agentId``: an agent that sees them knows this
        signed answer is fresh whatever its timestamp says, so a skewed agent still learns it was
        revoked. Only existing envelope fields carry the binding: an older agent ignores it.
        """
        payload = RejectPayload(
            code=self.code,
            reason=self.reason,
            supported_versions=VersionRange(min=SUPPORTED_VERSIONS[0], max=SUPPORTED_VERSIONS[1]),
        )
        if self.register is None:
            return HubReject(payload=payload)
        return HubReject(payload=payload, nonce=self.register.nonce, agent_id=self.register.agent_id)

    def who(self) -> str:
        """Who the refusal is about, for the log line: the hub's own words, none of the caller's
        but an id of a fixed shape (`CLAIMED_ID`)."""
        if not self.claimed:
            return f" (agent {self.agent})" if self.agent else ""
        if self.revoked_id:
            return f" (claims agent {self.agent}'s revoked id {self.claimed})"
        if self.claimed_name:
            return f" (claims agent {self.claimed_name}'s id {self.claimed})"
        return f" (claims agent id {self.claimed}, which is not enrolled here)"

    def agent_id(self) -> str | None:
        """The id of the enrolled agent whose last refusal this is (`Fleet.note_refusal`): of a
        register that parsed only."""
        if self.register is not None and self.register.agent_id and self.agent is not None:
            return self.register.agent_id
        return None


def unreadable_register(hub: Hub, exc: ProtocolError, text: str) -> Refused:
    """The refusal of a first frame that does not parse (`parse_frame` raised ``exc``), naming
    the agent whose id it claims, if any: unchecked, as a frame that does not parse cannot have
    its signature checked."""
    code: RejectCode = "unsupported_version" if exc.code == "unsupported_version" else "protocol_error"
    claimed = None if exc.code in UNREADABLE else claimed_agent_id(text, hub.config.max_frame_bytes)
    if claimed is None:
        return Refused(code, exc.message)
    record = hub.fleet.records.get(claimed)
    return Refused(code, exc.message, claimed=claimed, claimed_name=record.name if record else None)


def claimed_agent_id(text: str, max_frame_bytes: int) -> str | None:
    """The top-level ``agentId`` of the JSON object ``text``, if it has the shape of an id;
    None for anything else (too large, not JSON, no such field)."""
    if len(text) > max_frame_bytes:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    claimed = raw.get("agentId") if isinstance(raw, dict) else None
    return claimed if isinstance(claimed, str) and CLAIMED_ID.fullmatch(claimed) else None


async def refuse(hub: Hub, transport: Transport, codec: FrameCodec, refused: Refused, peer: str) -> None:
    """Log, audit and remember one refused connection, then answer it with ``hub.reject`` and close."""
    detail = {"peer": peer, "reason": refused.reason}
    if refused.claimed:
        detail["claimedId"] = refused.claimed
    since = SAID.due(f"{client_key(peer)} {refused.code} {refused.agent or refused.claimed_name or ''}")
    if since is not None:
        more = f" ({since - 1} more like it from there since the last line)" if since > 1 else ""
        log.warning("refused agent connection from %s%s: %s%s", peer, refused.who(), refused.reason, more)
    agent_id = refused.agent_id()
    if agent_id is not None:  # kept for an enrolled agent only; anyone may claim its id: the peer is named
        hub.fleet.note_refusal(agent_id, refused.reason, peer)
    await hub.audit(
        "agent",
        "agent.connect",
        refused.agent,
        "denied",
        detail=detail,
        unauthenticated=True,  # whoever opens a socket can cause it
    )
    await transport.send_text(codec.encode(refused.reject()))
    await transport.close(CLOSE_POLICY, refused.code)

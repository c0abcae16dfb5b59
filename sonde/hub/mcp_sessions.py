"""MCP sessions, admitted per API key: each key gets a share of the hub's sessions.

The SDK's session manager admits a session (its global limit, its owner) and builds its
transport; `SessionManager` then swaps in `PerRequestTransport` (`sonde.hub.mcp_answers`)
with the same id and settings, before any request reaches it. A key at its share has its
longest-idle session ended to make room (a client that never ends its sessions would
otherwise shut the key out until the idle timeout); when every one is busy, the new
session is refused with the SDK's 503. Both are logged once a minute per key, with counts.
"""

from __future__ import annotations

import logging
import math
import time
from contextvars import ContextVar

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from sonde.hub.mcp_answers import PerRequestTransport
from sonde.hub.mcp_events import EventLog, SessionEvents
from sonde.hub.tcp_guard import CONNECTIONS

log = logging.getLogger(__name__)

_refused_for_owner: ContextVar[bool] = ContextVar("sonde_mcp_refused_for_owner", default=False)
REFUSAL_LOG_EVERY_S = 60.0


class KeyEvents:
    """A log line about one key's sessions: the first, then one a minute with the count since,
    not a line for each of a client's retries."""

    def __init__(self, message: str) -> None:
        self._message = message  # %s the key, %d the sessions it has, %d the events since the last line
        self._said_at: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def say(self, key_id: str, owned: int) -> None:
        now = time.monotonic()
        self._since[key_id] = self._since.get(key_id, 0) + 1
        if now - self._said_at.get(key_id, -REFUSAL_LOG_EVERY_S) < REFUSAL_LOG_EVERY_S:
            return
        count, self._since[key_id], self._said_at[key_id] = self._since[key_id], 0, now
        log.warning(self._message, key_id, owned, count)


OWNER_REFUSALS = KeyEvents(
    "refusing new MCP sessions for key %s: its %d open sessions, its share, are all busy (end some);"
    " %d refused since the last line"
)
IDLE_ENDINGS = KeyEvents(
    "ending the longest-idle MCP session of key %s to open a new one: it has %d open, its share"
    " (its clients leave sessions open without ending them); %d ended since the last line"
)


class _NotTheGlobalLimit(logging.Filter):
    """Drops the SDK's "N sessions are already open" when the refusal was one key's share."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_refused_for_owner.get() and str(record.msg).startswith("Refusing to open a new session"))


logging.getLogger("mcp.server.streamable_http_manager").addFilter(_NotTheGlobalLimit())


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with `PerRequestTransport` for every session.

    The SDK admits the session (limit, owner) and builds its transport; the
    transport is then replaced, before any request reaches it, by ours with
    the same id and settings.
    """

    event_log: EventLog | None = None  # when set, each session's SSE answers can be resumed from it
    max_sessions_per_owner: int | None = None  # when set, one API key's share of the sessions

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if requestor is not None and self.max_sessions_per_owner is not None:
            owned = [session for session, owner in self._session_owners.items() if owner == requestor]
            if len(owned) >= self.max_sessions_per_owner and not self._end_idlest(owned, requestor):
                _refused_for_owner.set(True)  # the SDK's own line would blame its global limit
                OWNER_REFUSALS.say(requestor["client_id"], len(owned))
                return None  # the SDK answers 503 "Too many open sessions"
        admitted = super()._admit_session(requestor)
        if admitted is None or admitted.mcp_session_id is None:
            return admitted
        events = self.event_store
        if self.event_log is not None:
            events = SessionEvents(self.event_log, admitted.mcp_session_id)
        transport = PerRequestTransport(
            mcp_session_id=admitted.mcp_session_id,
            event_store=events,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        self._server_instances[admitted.mcp_session_id] = transport
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        """The SDK's, and the end counted for the garbage collector (`CONNECTIONS.ended`): an ended
        session's objects are cyclic garbage only a full collection frees, and its client's
        connection may never close (a proxy's pooled one, a client that keeps one alive). The SDK
        may discard a session twice (its DELETE, then its server task): it ended once."""
        if session_id in self._server_instances:
            CONNECTIONS.ended()
        await super()._discard_session(session_id, transport)

    def _end_idlest(self, owned: list[str], requestor: AuthorizationContext) -> bool:
        """End the one of ``owned`` idle longest (nothing in flight, no open stream) to make room.

        A client that stops without ending its session (a crash, a killed script) leaves it
        open until the idle timeout: without this, 200 of them shut the key out of MCP for
        that long. The ended session's id answers 404 from now on, and MCP clients open a
        new session on a 404. False when every session of the key is busy.
        """
        idlest, since = None, math.inf
        for session in owned:
            transport = self._server_instances.get(session)
            scope = transport.idle_scope if transport is not None else None
            if transport is None or scope is None or transport._requests_in_flight or scope.cancel_called:
                continue
            if scope.deadline < since:
                idlest, since = session, scope.deadline
        if idlest is None:
            return False
        transport = self._server_instances.pop(idlest)
        self._session_owners.pop(idlest, None)
        CONNECTIONS.ended()
        assert transport.idle_scope is not None
        transport.idle_scope.cancel()  # its server task ends and terminates the transport
        IDLE_ENDINGS.say(requestor["client_id"], len(owned))
        return True

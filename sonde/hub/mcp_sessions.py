"""MCP sessions: each API key gets a share of the hub's, and sessions left idle make room.

The SDK's session manager builds a session's transport; `SessionManager` admits new sessions
itself and swaps in `PerRequestTransport` (`sonde.hub.mcp_answers`) with the same id and
settings, before any request reaches it. A client that never ends its sessions (a crash, a
killed script) would otherwise hold them until the idle timeout, so at a limit the
longest-idle session (no request in flight, no open stream) is ended to make room: one of
the key's own at its share, the hub's, whoever's it is, at the hub-wide limit (`max_sessions`).
Only when every candidate is busy is the new session refused, 503 with a message naming the
limit and a Retry-After. Each is logged once a minute, with a count. `OpenSessions` keeps the
sessions in order of last use, so none of this scans every session. The sessions of an API key
that is revoked are ended within `REVOKED_CHECK_EVERY_S` of the hub seeing it (`revoked_keys`).
"""

from __future__ import annotations

import heapq
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import trio
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    AuthorizationContext,
    authorization_context,
)
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from sonde.hub.logs import Throttled
from sonde.hub.mcp_answers import PerRequestTransport
from sonde.hub.mcp_events import EventLog, SessionEvents
from sonde.hub.mcp_refusals import send_refusal
from sonde.hub.tcp_guard import CONNECTIONS

log = logging.getLogger(__name__)

REVOKED_CHECK_EVERY_S = 2.0  # with the key cache's 5 s, a revoked key's sessions end within ~7 s
SESSIONS_RETRY_AFTER_S = 10  # the Retry-After of a refused session: room comes as requests end
BUSY = "(a request being answered or an event stream open)"
SESSION_ID_HEADER = b"mcp-session-id"

RevokedKeys = Callable[[frozenset[str]], Awaitable[set[str]]]


class OpenSessions:
    """The open sessions in order of last use, least recent first, hub-wide and per API key.

    Each operation is O(1): a session opened, used (a request of it ended) or ended; the walk
    for the idlest (`least_recent`) starts at the least recently used and is as long as the
    busy sessions it passes. ~200 bytes per session.
    """

    def __init__(self) -> None:
        self._all: OrderedDict[str, str | None] = OrderedDict()  # session -> its key (None: no key)
        self._by_key: dict[str, OrderedDict[str, None]] = {}
        self.uses = 0  # requests ended so far: a session may have become idle only when it grows

    def __len__(self) -> int:
        return len(self._all)

    def opened(self, session: str, key_id: str | None) -> None:
        self._all[session] = key_id
        if key_id is not None:
            self._by_key.setdefault(key_id, OrderedDict())[session] = None

    def used(self, session: str, key_id: str | None) -> None:
        """A request of ``session`` by ``key_id`` ended (another key's is not its use)."""
        self.uses += 1
        if session in self._all and self._all[session] == key_id:
            self._all.move_to_end(session)
            if key_id is not None:
                self._by_key[key_id].move_to_end(session)

    def ended(self, session: str) -> None:
        key_id = self._all.pop(session, None)
        of_key = self._by_key.get(key_id) if key_id is not None else None
        if of_key is not None:
            of_key.pop(session, None)
            if not of_key:
                del self._by_key[key_id]  # type: ignore[arg-type]

    def count(self, key_id: str) -> int:
        return len(self._by_key.get(key_id, ()))

    def key_of(self, session: str) -> str | None:
        return self._all.get(session)

    def keys(self) -> frozenset[str]:
        """The API keys holding sessions: O(keys)."""
        return frozenset(self._by_key)

    def of_key(self, key_id: str) -> list[str]:
        return list(self._by_key.get(key_id, ()))

    def least_recent(self, key_id: str | None, is_busy: Callable[[str], bool]) -> str | None:
        """The least recently used session (of ``key_id``; of the hub if None) not busy; None if
        all are. Each busy one passed goes to the back: when its last request ends it goes
        there anyway, so the next walk does not pass it again."""
        order: OrderedDict[str, Any] = (
            self._all if key_id is None else self._by_key.get(key_id, OrderedDict())
        )
        passed = []
        found = None
        for session in order:
            if not is_busy(session):
                found = session
                break
            passed.append(session)
        for session in passed:
            order.move_to_end(session)
        return found

    def most_held(self, top: int = 3) -> str:
        """The keys holding the most sessions, for a log line: O(keys)."""
        largest = heapq.nlargest(top, self._by_key.items(), key=lambda item: len(item[1]))
        return ", ".join(f"{key_id} ({len(sessions)})" for key_id, sessions in largest) or "none"

    def clear(self) -> None:
        self._all.clear()
        self._by_key.clear()


def session_id_of(scope: Any) -> str | None:
    for name, value in scope["headers"]:
        if name.lower() == SESSION_ID_HEADER:
            return str(value.decode("latin-1"))
    return None


def key_of(scope: Any) -> str | None:
    user = scope.get("user")
    return authorization_context(user)["client_id"] if isinstance(user, AuthenticatedUser) else None


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with `PerRequestTransport` for every session, a share of the
    sessions per API key, room made at either limit, and revoked keys' sessions ended.

    Costs: per request, a look at its headers and O(1) (`OpenSessions.used`); per new session,
    O(1) plus the busy sessions passed on the way to the idlest, only at a limit (a refusal
    when nothing has become idle since the last walk is O(1)); per `REVOKED_CHECK_EVERY_S`,
    one database read of the keys holding sessions, only while some do.
    """

    event_log: EventLog | None = None  # when set, each session's SSE answers can be resumed from it
    max_sessions_per_owner: int | None = None  # when set, one API key's share of the sessions
    revoked_keys: RevokedKeys | None = None  # when set: which of these keys are revoked (or gone)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open = OpenSessions()
        self._all_busy_at_uses = -1  # `OpenSessions.uses` when a walk of the hub found all busy
        self._said = {name: Throttled() for name in ("key_refused", "key_ended", "hub_refused", "hub_ended")}

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The SDK's, and the ending of revoked keys' sessions while it runs."""
        async with super().run(), trio.open_nursery() as nursery:
            if self.revoked_keys is not None:
                nursery.start_soon(self._end_sessions_of_revoked_keys, self.revoked_keys)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()
                self._open.clear()

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().handle_request(scope, receive, send)
        finally:
            session = session_id_of(scope)
            if session is not None:
                self._open.used(session, key_of(scope))

    async def _handle_stateful_request(self, scope: Any, receive: Any, send: Any) -> None:
        if session_id_of(scope) is not None:
            await super()._handle_stateful_request(scope, receive, send)
            return
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        async with self._session_creation_lock:
            admitted = self._admit(requestor)
        if isinstance(admitted, str):
            retry = [(b"retry-after", str(SESSIONS_RETRY_AFTER_S).encode())]
            await send_refusal(send, 503, "too_many_sessions", admitted, retry)
            return
        try:
            await self._serve_opening_request(admitted, scope, receive, send)
        finally:
            assert admitted.mcp_session_id is not None
            self._open.used(admitted.mcp_session_id, requestor["client_id"] if requestor else None)

    def _admit(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | str:
        """A new session's transport, room made for it; or why it is refused."""
        key_id = requestor["client_id"] if requestor is not None else None
        refusal = self._room_for_key(key_id) if key_id is not None else None
        if refusal is None:
            refusal = self._room_in_hub(key_id)
        if refusal is not None:
            return refusal
        admitted = super()._admit_session(requestor)
        assert admitted is not None  # room was made
        assert admitted.mcp_session_id is not None
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
        self._open.opened(admitted.mcp_session_id, key_id)
        return transport

    def _room_for_key(self, key_id: str) -> str | None:
        """Room within ``key_id``'s share: its idlest session ended if need be; else the refusal."""
        share = self.max_sessions_per_owner
        if share is None or self._open.count(key_id) < share:
            return None
        idlest = self._open.least_recent(key_id, self._is_busy)
        if idlest is None:
            if (count := self._said["key_refused"].due(key_id)) is not None:
                log.warning(
                    "refusing new MCP sessions for key %s: its %d open sessions, its share, are all"
                    " busy %s (end some); %d refused since the last line",
                    *(key_id, share, BUSY, count),
                )
            return (
                f"Too many open sessions: this API key has {share} MCP sessions open, its share of the"
                f" hub's, and every one is busy {BUSY}; end one (DELETE /mcp with its Mcp-Session-Id)"
                f" or try again in {SESSIONS_RETRY_AFTER_S} s"
            )
        self._end(idlest)
        if (count := self._said["key_ended"].due(key_id)) is not None:
            log.warning(
                "ending the longest-idle MCP session of key %s to open a new one: it has %d open, its"
                " share (its clients leave sessions open without ending them); %d ended since the last line",
                *(key_id, share, count),
            )
        return None

    def _room_in_hub(self, key_id: str | None) -> str | None:
        """Room within the hub-wide limit: the hub's idlest session ended if need be, whoever's it
        is; else the refusal. A walk that found every session busy is not repeated until a
        request has ended since."""
        limit = self.max_sessions
        if limit is None or len(self._server_instances) < limit:
            return None
        idlest = None
        if self._all_busy_at_uses != self._open.uses:
            idlest = self._open.least_recent(None, self._is_busy)
        if idlest is None:
            self._all_busy_at_uses = self._open.uses
            if (count := self._said["hub_refused"].due("hub")) is not None:
                log.warning(
                    "refusing new MCP sessions to every key: the hub has %d open, its limit, and every"
                    " one is busy %s; the keys holding the most: %s (revoke a key to end its sessions);"
                    " %d refused since the last line",
                    *(limit, BUSY, self._open.most_held(), count),
                )
            return (
                f"Too many open sessions: the hub's limit of {limit} MCP sessions are open and every"
                f" one is busy {BUSY}; try again in {SESSIONS_RETRY_AFTER_S} s, or ask the hub's admin"
                " (its log names the keys holding them)"
            )
        owner = self._open.key_of(idlest)
        self._end(idlest)
        if (count := self._said["hub_ended"].due("hub")) is not None:
            log.warning(
                "ending the hub's longest-idle MCP session (of key %s) to open one for key %s: the hub"
                " has %d open, its limit (clients leave sessions open without ending them; the keys"
                " holding the most: %s); %d ended since the last line",
                *(owner, key_id, limit, self._open.most_held(), count),
            )
        return None

    def _is_busy(self, session: str) -> bool:
        """A request in flight (an open GET stream included), not yet started, or already ending."""
        transport = self._server_instances.get(session)
        scope = transport.idle_scope if transport is not None else None
        return (
            transport is None or scope is None or bool(transport._requests_in_flight) or scope.cancel_called
        )

    def _end(self, session: str) -> StreamableHTTPServerTransport | None:
        """End ``session`` now: its id answers 404 from here on, and MCP clients open a new session
        on a 404. Its server task ends (the idle scope) and terminates the transport."""
        transport = self._server_instances.pop(session, None)
        self._session_owners.pop(session, None)
        self._open.ended(session)
        if transport is None:
            return None
        CONNECTIONS.ended()
        if transport.idle_scope is not None:
            transport.idle_scope.cancel()
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        """The SDK's, and the end counted for the garbage collector (`CONNECTIONS.ended`): an ended
        session's objects are cyclic garbage only a full collection frees, and its client's
        connection may never close (a proxy's pooled one, a client that keeps one alive). The SDK
        may discard a session twice (its DELETE, then its server task): it ended once."""
        if session_id in self._server_instances:
            CONNECTIONS.ended()
        self._open.ended(session_id)
        await super()._discard_session(session_id, transport)

    async def _end_sessions_of_revoked_keys(self, revoked_keys: RevokedKeys) -> None:
        """Until cancelled, every `REVOKED_CHECK_EVERY_S`: end every session of a key revoked
        since (`sonde hub key revoke` changes only the database), busy or not."""
        while True:
            await trio.sleep(REVOKED_CHECK_EVERY_S)
            holders = self._open.keys()
            if holders:
                for key_id in await revoked_keys(holders):
                    await self._end_all(key_id, self._open.of_key(key_id))

    async def _end_all(self, key_id: str, sessions: Iterable[str]) -> None:
        ended = [transport for session in sessions if (transport := self._end(session)) is not None]
        if ended:
            log.warning(
                "API key %s was revoked: ending its %d open MCP sessions; its requests get 401 from now on",
                *(key_id, len(ended)),
            )
        for transport in ended:
            if transport.idle_scope is None and not transport.is_terminated:  # no idle timeout set
                with trio.CancelScope(shield=True):
                    await transport.terminate()

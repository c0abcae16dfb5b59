"""Answer an MCP request as one JSON body unless it asks a tool that reports progress for it.

The SDK's streamable HTTP transport answers either every request of a
session over SSE or every one as a JSON body. SSE is what carries progress
notifications, but for a call that asked for none it doubles the hub's CPU
per call (an event-stream response with its writer and watcher tasks and
several sends instead of one). Here the choice is made per request: a
``tools/call`` of a tool that reports progress (`ToolSpec.reports_progress`:
``health_check``) whose ``params._meta.progressToken`` is set is answered over
SSE, anything else as a single ``application/json`` body. A progress token
on a call to any other tool asks for what it would never get (those tools
send no progress), so it does not buy an event stream. Both are answers the
MCP specification lets a server give, and every conforming client reads both.

`choose_answer` reads the request body (the root app has it in hand) and
says which; `answering_as_json` marks the request task for the transport.
The transport reads the mark through its ``is_json_response_enabled``
attribute, which the SDK consults only inside the request's own task, and
drops what the SDK itself drops in JSON mode: a notification tied to a
request whose answer is a JSON body has no wire to go out on.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse

from sonde.hub.mcp_events import EventLog, SessionEvents

log = logging.getLogger(__name__)

# The JSON-RPC id (as the SDK keys it: ``str(id)``) of the request this task
# answers as one JSON body; None: over SSE.
_json_answer: ContextVar[str | None] = ContextVar("sonde_mcp_json_answer", default=None)


def choose_answer(body: bytes, progress_tools: frozenset[str]) -> str | None:
    """The id of a request to answer as JSON, or None to leave it to SSE.

    A well-formed request with a plain id is answered as JSON unless it calls
    one of ``progress_tools`` with a progress token; anything else
    (notifications, responses, bodies the SDK will refuse) takes the SDK's
    own path unchanged.
    """
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # a body nested past the parser's depth: the SDK refuses it
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return None
    meta = (params or {}).get("_meta")
    if meta is not None and not isinstance(meta, dict):
        return None
    wants_progress = meta is not None and meta.get("progressToken") is not None
    if wants_progress and message["method"] == "tools/call" and (params or {}).get("name") in progress_tools:
        return None
    return str(request_id)


@contextmanager
def answering_as_json(request_id: str | None) -> Iterator[None]:
    """Mark the current task's request as answered as JSON (None: over SSE)."""
    token = _json_answer.set(request_id)
    try:
        yield
    finally:
        _json_answer.reset(token)


class _DropUnwired:
    """The session's write stream, less notifications tied to a request answered as JSON.

    The SDK's router would otherwise queue such a notification where the
    request's JSON answer is awaited, and send it in place of the answer.
    """

    def __init__(self, inner: WriteStream[SessionMessage], json_requests: set[str]) -> None:
        self._inner = inner
        self._json_requests = json_requests

    async def send(self, item: SessionMessage, /) -> None:
        meta = item.metadata
        if (
            isinstance(meta, ServerMessageMetadata)
            and meta.related_request_id is not None
            and str(meta.related_request_id) in self._json_requests
            and not isinstance(item.message, JSONRPCResponse | JSONRPCError)
        ):
            log.debug("dropped a notification for request %s, answered as JSON", meta.related_request_id)
            return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _DropUnwired:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


class PerRequestTransport(StreamableHTTPServerTransport):
    """The SDK's transport, choosing JSON or SSE per request (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._json_requests: set[str] = set()
        super().__init__(*args, **kwargs)

    @property
    def is_json_response_enabled(self) -> bool:
        return _json_answer.get() is not None

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        if value:
            raise ValueError(
                "PerRequestTransport chooses JSON or SSE per request; it takes no session-wide mode"
            )

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        request_id = _json_answer.get()
        if request_id is None:
            await super().handle_request(scope, receive, send)
            return
        self._json_requests.add(request_id)
        try:
            await super().handle_request(scope, receive, send)
        finally:
            self._json_requests.discard(request_id)

    @asynccontextmanager
    async def connect(
        self,
    ) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
        # The session's tasks (its router above all) start inside the request
        # that opened it; they must not inherit that request's choice.
        with answering_as_json(None):
            async with super().connect() as (read_stream, write_stream):
                yield read_stream, _DropUnwired(write_stream, self._json_requests)


_refused_for_owner: ContextVar[bool] = ContextVar("sonde_mcp_refused_for_owner", default=False)
REFUSAL_LOG_EVERY_S = 60.0


class OwnerRefusals:
    """The log line for refused sessions: the first for a key, then one a minute with the count
    since, not a line for each of a client's retries."""

    def __init__(self) -> None:
        self._said_at: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def say(self, key_id: str, owned: int) -> None:
        now = time.monotonic()
        self._since[key_id] = self._since.get(key_id, 0) + 1
        if now - self._said_at.get(key_id, -REFUSAL_LOG_EVERY_S) < REFUSAL_LOG_EVERY_S:
            return
        refused, self._since[key_id], self._said_at[key_id] = self._since[key_id], 0, now
        log.warning(
            "refusing new MCP sessions for key %s: it has %d open, its share (end some, or let them idle "
            "out); %d refused since the last line",
            key_id,
            owned,
            refused,
        )


OWNER_REFUSALS = OwnerRefusals()


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
            owned = sum(1 for owner in self._session_owners.values() if owner == requestor)
            if owned >= self.max_sessions_per_owner:
                _refused_for_owner.set(True)  # the SDK's own line would blame its global limit
                OWNER_REFUSALS.say(requestor["client_id"], owned)
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

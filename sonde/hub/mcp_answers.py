"""Answer an MCP request as one JSON body unless it asks for progress on a call that waits on agents.

The SDK's streamable HTTP transport answers either every request of a
session over SSE or every one as a JSON body. SSE sends the response
headers at once and carries progress notifications, but for a call that
asked for none it doubles the hub's CPU per call (an event-stream response
with its writer and watcher tasks and several sends instead of one). Here
the choice is made per request: a ``tools/call`` whose
``params._meta.progressToken`` is set, of a tool that waits on agents with
those arguments (`ToolSpec.waits_on_agents`: probe, diagnose, health_check,
query_logs of an agent's logs), is answered over SSE, anything else as a
single ``application/json`` body. Such a call may run as long as its probe's
timeout (up to an hour): a client that waits for response headers only so
long (Claude Code: 60 s) must have them at once, and the call sends a
keepalive progress notification while it waits (`sonde.hub.mcp_keepalive`).
A tool that answers from the hub (list_agents, list_capabilities,
agent_overview, query_logs of the audit trail) answers as JSON even with a
progress token: it is done before any client would give up. Both are
answers the MCP specification lets a server give, and every conforming
client reads both.

`plan_answer` reads the request body (the root app has it in hand) and
says which; `serving` marks the request task (an `McpPost`) for the transport.
The transport reads the mark through its ``is_json_response_enabled``
attribute, which the SDK consults only inside the request's own task, and
drops what the SDK itself drops in JSON mode: a notification tied to a
request whose answer is a JSON body has no wire to go out on.

The transport also keeps two promises the SDK's does not: a request whose id is still being
answered on its session is refused with 409 (the SDK would let it take the first one's place,
leaving one HTTP request unanswered for good), and a request whose client disconnects is
cancelled, or if it may be resumed, still counted against its key until it ends
(`PerRequestTransport`). Ids ``7`` and ``"7"`` are two requests (JSON-RPC tells them apart),
but the SDK files both answers under ``"7"``: the second waits for the first to end.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

import anyio
import trio
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse
from mcp_types.version import is_version_at_least

from sonde.hub.mcp_refusals import INVALID_REQUEST, send_json

log = logging.getLogger(__name__)

REPEATED_ID_STATUS = 409
RESUMABLE_FROM = "2025-11-25"  # the SDK primes an SSE answer (makes it resumable) from this revision on


@dataclass(frozen=True, slots=True)
class AnswerPlan:
    """A JSON-RPC request read from a POST body: its id and whether it is answered as one JSON body.

    ``request_id`` is the id as the SDK keys it (``str(id)``: 7 and "7" alike); ``wire_id`` as the
    client sent it (which tells them apart).
    """

    request_id: str
    wire_id: int | str
    as_json: bool


def plan_answer(
    body: bytes, waits_on_agents: Callable[[str, Any], bool], accepts_sse: bool = True
) -> AnswerPlan | None:
    """How to answer the request in ``body``; None for anything that is not one.

    A well-formed request with a plain id is answered as JSON unless it is a
    ``tools/call`` with a progress token that ``waits_on_agents(tool, arguments)``
    says waits on agents, from a client that ``accepts_sse`` (one that takes only JSON
    gets its answer, without progress, rather than a 406); anything else (notifications,
    responses, bodies the SDK will refuse) takes the SDK's own path unchanged.
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
    token = None if meta is None else meta.get("progressToken")  # MCP: a string or an integer
    wants_progress = isinstance(token, int | str) and not isinstance(token, bool)
    tool = (params or {}).get("name")
    over_sse = (
        accepts_sse
        and wants_progress
        and message["method"] == "tools/call"
        and isinstance(tool, str)
        and waits_on_agents(tool, (params or {}).get("arguments"))
    )
    return AnswerPlan(str(request_id), request_id, as_json=not over_sse)


def takes_event_stream(accept: str) -> bool:
    """Whether an ``Accept`` header takes ``text/event-stream`` (as the SDK reads it)."""
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(types & {"text/event-stream", "text/*", "*/*"})


class McpPost:
    """One POST to ``/mcp`` whose body the root app has read: how to answer it, and whether its
    client is still there.

    `receive` hands the SDK the body, then defers to the client's ``receive``;
    once `watch_client` runs, that task is the client's only reader and
    `receive` waits for it to see the client go (``http.disconnect``).
    """

    def __init__(self, plan: AnswerPlan | None, body: bytes, client_receive: Any, client_send: Any) -> None:
        self.plan = plan
        self.answered = False  # the answer's last byte was handed to the server
        self.gone = trio.Event()  # the client disconnected before its answer was sent
        self.dispatched = trio.Event()  # the request went to the session (so a cancel can follow it)
        self.resumable = False  # an SSE answer the client may resume after a drop: never cancelled
        self._body: bytes | None = body
        self._client_receive = client_receive
        self._client_send = client_send
        self._watched = False

    async def receive(self) -> dict[str, Any]:
        if self._body is not None:
            body, self._body = self._body, None
            return {"type": "http.request", "body": body, "more_body": False}
        if not self._watched:
            return cast("dict[str, Any]", await self._client_receive())
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.answered:  # the SDK's 500 after its 202 (`sonde.hub.mcp_session_end`): hypercorn would raise
            return
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True  # first: hypercorn says the cycle is over before this send returns
        await self._client_send(message)

    async def watch_client(self) -> None:
        """Return once the client has disconnected (its body was read whole: nothing else can come);
        `gone` is set if that was before its answer (hypercorn says so after an answer too)."""
        self._watched = True
        while (await self._client_receive())["type"] != "http.disconnect":
            pass
        if not self.answered:
            self.gone.set()


# The POST the current task serves; None: not a request with a plain id, or a session's own task.
_post: ContextVar[McpPost | None] = ContextVar("sonde_mcp_post", default=None)


@contextmanager
def serving(post: McpPost | None) -> Iterator[None]:
    """Mark ``post`` as the request the current task serves (None: none)."""
    token = _post.set(post)
    try:
        yield
    finally:
        _post.reset(token)


async def refuse_repeated_id(plan: AnswerPlan, send: Any) -> None:
    """409 with a JSON-RPC error: ``plan``'s id is already being answered on this session.

    The SDK keys each request's answer by its id, and a second request with the same id
    would take the first's place: one of the two would never be answered, and its task
    and connection would be held until the hub restarts.
    """
    error = {
        "jsonrpc": "2.0",
        "id": plan.wire_id,
        "error": {
            "code": INVALID_REQUEST,
            "message": f"request id {plan.wire_id!r} is already in flight on this session; "
            "wait for its answer or use a new id",
        },
    }
    await send_json(send, REPEATED_ID_STATUS, error, [])


class _DropUnwired:
    """The session's write stream, less notifications tied to a request answered as JSON.

    The SDK's router would otherwise queue such a notification where the
    request's JSON answer is awaited, and send it in place of the answer.
    """

    def __init__(
        self, inner: WriteStream[SessionMessage], json_requests: set[str], running_on: dict[str, trio.Event]
    ) -> None:
        self._inner = inner
        self._json_requests = json_requests
        self._running_on = running_on

    async def send(self, item: SessionMessage, /) -> None:
        if isinstance(item.message, JSONRPCResponse | JSONRPCError) and item.message.id is not None:
            ended = self._running_on.get(str(item.message.id))
            if ended is not None:
                ended.set()
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
    """The SDK's transport, choosing JSON or SSE per request (see the module doc), refusing a
    request whose id is already being answered, and cancelling a request whose client has gone.

    A client that disconnects before its answer gets a ``notifications/cancelled`` for its
    request, as if it had sent one: the tool handler sees `trio.Cancelled`, the agent gets
    ``probe.cancel``, and the call is audited ``cancelled``. An SSE answer the client may resume
    with ``Last-Event-ID`` (protocol 2025-11-25 on) is the exception: it runs on for the resume,
    its POST held until it ends (or its session does), counted against its key (`McpInFlight`):
    else a key could start calls and drop them, holding every agent's probe slots with none.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._json_requests: set[str] = set()
        self._in_flight: set[int | str] = set()  # the wire ids whose POST is being served (7 and "7" apart)
        self._running_on: dict[str, trio.Event] = {}  # str(id) of each request -> set when answered
        self._session_over = False  # no call of it runs on any more
        # the SDK's key, str(id), of each request it answers now -> (its wire id, set when it is done)
        self._answering: dict[str, tuple[int | str, trio.Event]] = {}
        super().__init__(*args, **kwargs)

    @property
    def is_json_response_enabled(self) -> bool:
        post = _post.get()
        return post is not None and post.plan is not None and post.plan.as_json

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        if value:
            raise ValueError(
                "PerRequestTransport chooses JSON or SSE per request; it takes no session-wide mode"
            )

    async def handle_request(self, scope: Any, receive: Any, send: Any) -> None:
        post = _post.get()
        if post is None or post.plan is None:
            await super().handle_request(scope, receive, send)
            return
        plan = post.plan
        if plan.wire_id in self._in_flight:
            await refuse_repeated_id(plan, send)
            return
        self._in_flight.add(plan.wire_id)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._cancel_when_gone, post)
                if await self._wait_for_key(plan, post):
                    await self._answer(plan, post, scope, receive, send)
                if not (post.gone.is_set() and post.dispatched.is_set()):
                    nursery.cancel_scope.cancel()  # answered, or never reached the session
        finally:
            self._in_flight.discard(plan.wire_id)

    async def _wait_for_key(self, plan: AnswerPlan, post: McpPost) -> bool:
        """Wait while another id the SDK keys the same is answered (7 and "7": both ``"7"``).

        JSON-RPC tells them apart, but the SDK files each answer under ``str(id)``:
        answered together, one would take the other's place. False if the client
        went while it waited.
        """
        while (other := self._answering.get(plan.request_id)) is not None:
            other_id, other_done = other
            log.info(
                "request %r waits for request %r to end: the SDK answers both as %r",
                plan.wire_id,
                other_id,
                plan.request_id,
            )
            async with trio.open_nursery() as waiting:
                for event in (other_done, post.gone):
                    waiting.start_soon(set_then_cancel, event, waiting.cancel_scope)
            if post.gone.is_set():
                return False
        return True

    async def _answer(self, plan: AnswerPlan, post: McpPost, scope: Any, receive: Any, send: Any) -> None:
        post.resumable = not plan.as_json and self._event_store is not None and speaks_resumable(scope)
        done = trio.Event()
        self._answering[plan.request_id] = (plan.wire_id, done)
        if plan.as_json:
            self._json_requests.add(plan.request_id)
        ended = self._running_on[plan.request_id] = trio.Event()
        try:
            await super().handle_request(scope, receive, send)
            if post.resumable and post.gone.is_set() and post.dispatched.is_set() and not self._session_over:
                await ended.wait()  # the call runs on for a resume: it is still this key's
        finally:
            del self._running_on[plan.request_id]
            del self._answering[plan.request_id]
            self._json_requests.discard(plan.request_id)
            done.set()

    async def _cancel_when_gone(self, post: McpPost) -> None:
        await post.watch_client()
        if not post.gone.is_set():
            return
        await post.dispatched.wait()  # no checkpoint between this mark and the request's send
        writer = self._read_stream_writer
        if post.resumable or post.plan is None or writer is None:
            return
        log.debug("request %s: the client went before its answer; cancelling it", post.plan.request_id)
        cancel = JSONRPCNotification(
            jsonrpc="2.0",
            method="notifications/cancelled",
            params={"requestId": post.plan.wire_id, "reason": "the client disconnected"},
        )
        # the session ended meanwhile (its DELETE, an eviction): the SDK's streams are anyio's
        with contextlib.suppress(
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ):
            await writer.send(SessionMessage(cancel))

    async def _terminate_unanswered_request(self, request_id: Any) -> None:  # past _DropUnwired
        await super()._terminate_unanswered_request(request_id)
        if (ended := self._running_on.get(str(request_id))) is not None:
            ended.set()

    def _message_metadata(self, request: Any, **kwargs: Any) -> ServerMessageMetadata:
        # The SDK frames a request with this just before it sends it to the session, with no
        # checkpoint between: a cancel sent after this mark reaches the session after it.
        post = _post.get()
        if post is not None and kwargs.get("on_request_unanswered") is not None:
            post.dispatched.set()
        return super()._message_metadata(request, **kwargs)

    @asynccontextmanager
    async def connect(
        self,
    ) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
        # The session's tasks (its router above all) start inside the request
        # that opened it; they must not inherit that request's choice.
        with serving(None):
            try:
                async with super().connect() as (read_stream, write_stream):
                    yield read_stream, _DropUnwired(write_stream, self._json_requests, self._running_on)
            finally:  # the session ended: no call of it runs on
                self._session_over = True
                for ended in self._running_on.values():
                    ended.set()


async def set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once ``event`` is set: with one for each, it waits for the first of several."""
    await event.wait()
    scope.cancel()


def speaks_resumable(scope: Any) -> bool:
    """Whether the request's protocol revision has the SDK prime (make resumable) an SSE answer."""
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            return is_version_at_least(value.decode("latin-1"), RESUMABLE_FROM)
    return False

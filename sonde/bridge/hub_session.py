"""One MCP session with the hub over Streamable HTTP, as the bridge keeps it.

It owns the HTTP side: which headers each request carries (the API key, the
``Mcp-Session-Id`` the hub gave in answer to ``initialize``, the negotiated
``MCP-Protocol-Version`` after that; for a client on the session-less
revision, the routing headers each message's own version asks for), reading an answer body as JSON or as an
SSE stream parsed as it arrives, re-initializing once when the hub has
forgotten the session (404), and the final ``DELETE``.

The session becomes *ready* when the client's ``notifications/initialized``
has been accepted; each ready session gets a new ``generation`` number, which
is how a request that got a 404 tells whether someone else already
re-initialized while it was waiting.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httpx2
import trio

from sonde.bridge import jsonrpc
from sonde.bridge.api_key import ApiKey
from sonde.bridge.sse import SSEError, SSEParser

log = logging.getLogger(__name__)

SESSION_HEADER = "Mcp-Session-Id"
LAST_EVENT_ID_HEADER = "Last-Event-ID"
POST_ACCEPT = "application/json, text/event-stream"
MAX_JSON_BODY_BYTES = 16 * 1024 * 1024

INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'

CONNECT_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
ANSWER_SILENCE_S = 60.0  # the hub answers all but a tool call at once (a notification: 202)
TOOL_CALL_SILENCE_S = 3660.0  # a tool call's JSON answer comes whole at its end: past the longest
# --probe-timeout the hub takes (3600 s); one with progress (SSE) sends as it goes

# Called with each message the hub sends; returns True once the caller has what it waited for.
Deliver = Callable[[Any], Awaitable[bool]]


class HubAnswerError(Exception):
    """The hub's answer could not be read as MCP (wrong content type, bad or oversized body)."""


class ConnectionDropped(Exception):
    """The hub closed the connection after taking the request, before any status line: it may or may
    not have run it. Raised from the transport error (not a connect failure: that sent nothing)."""


class AnswerBrokeOff(Exception):
    """The hub's answer (an event stream) broke off once started, and could not be picked up
    again: the request reached the hub and may or may not have run. Never sent again."""


# What a POST or GET to the hub may fail with: the network, HTTP, or an answer not MCP
TRANSPORT_ERRORS = (
    httpx2.HTTPError,
    httpx2.StreamError,
    HubAnswerError,
    SSEError,
    ConnectionDropped,
    AnswerBrokeOff,
)
DROPPED = (httpx2.ReadError, httpx2.WriteError, httpx2.CloseError, httpx2.RemoteProtocolError)


@dataclass(frozen=True)
class HubPatience:
    """How long the hub may send nothing at all on one answer before the bridge gives up on it.

    A limit on silence, not on length: an answer that keeps sending (an event
    stream of progress) runs as long as it does. A tool call gets the long one.
    """

    answer_s: float = ANSWER_SILENCE_S
    tool_call_s: float = TOOL_CALL_SILENCE_S

    def for_message(self, message: Any) -> float:
        call = jsonrpc.method_of(message) == "tools/call" and "id" in message
        return self.tool_call_s if call else self.answer_s

    def client_timeout(self) -> httpx2.Timeout:
        return httpx2.Timeout(connect=CONNECT_TIMEOUT_S, read=self.answer_s, write=WRITE_TIMEOUT_S, pool=None)


def is_success(response: httpx2.Response) -> bool:
    return 200 <= response.status_code < 300


def describe_status(response: httpx2.Response) -> str:
    """``HTTP 401 Unauthorized``: the standard phrase when the server sent none (hypercorn sends none)."""
    reason = response.reason_phrase or standard_phrase(response.status_code)
    return f"HTTP {response.status_code}{' ' + reason if reason else ''}"


def standard_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


async def read_messages(response: httpx2.Response, deliver: Deliver, parser: SSEParser | None = None) -> None:
    """Hand each JSON-RPC message in a 2xx body to ``deliver``, as it arrives.

    Stops when ``deliver`` returns True or the body ends. An event stream is read
    with ``parser`` when given (it keeps the last event id, to resume from).
    Raises `HubAnswerError`, `sonde.bridge.sse.SSEError` and `httpx2.HTTPError`.
    """
    content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type == "text/event-stream":
        await read_event_stream(response, deliver, parser)
        return
    body = await read_capped(response)
    if content_type == "application/json":
        try:
            message = json.loads(body)
        except ValueError as exc:
            raise HubAnswerError(f"the hub's JSON answer is not JSON: {exc}") from None
        await deliver(message)
    elif body.strip():  # an empty body (an acknowledged notification) needs no type
        raise HubAnswerError(f"the hub answered with content type {content_type or '(none)'!r}")


async def read_capped(response: httpx2.Response, limit: int = MAX_JSON_BODY_BYTES) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise HubAnswerError(f"the hub's answer is larger than {limit} bytes")
    return bytes(body)


async def read_event_stream(
    response: httpx2.Response, deliver: Deliver, parser: SSEParser | None = None
) -> None:
    """Parse an SSE body chunk by chunk; each ``message`` event's data is one JSON-RPC message."""
    parser = parser or SSEParser()
    async for chunk in response.aiter_bytes():
        for event in parser.feed(chunk):
            if event.event != "message":
                log.debug("ignoring an SSE event of type %r", event.event)
                continue
            if not event.data.strip():
                continue  # a priming event: only its id matters, and the parser keeps that
            try:
                message = json.loads(event.data)
            except ValueError:
                log.warning("the hub sent an SSE event that is not JSON; skipped: %.200r", event.data)
                continue
            if await deliver(message):
                return


class HubSession:
    """The session state and HTTP requests of one bridge. See the module doc."""

    def __init__(self, client: httpx2.AsyncClient, mcp_url: str, key: ApiKey | None = None) -> None:
        self.client = client
        self.url = mcp_url
        self.key = key or ApiKey(client.headers.get("Authorization", "").removeprefix("Bearer "))
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.envelope_version: str | None = None  # the version the client last named per message
        self.generation = 0
        self._initialize: tuple[Any, bytes] | None = None  # the client's own: (id, body)
        self._initialized: bytes | None = None
        self._reinitializing = trio.Lock()
        self._ready = trio.Event()
        self._opened = False  # an initialize of ours was accepted once
        self.outage: str | None = None  # why the hub cannot be reached, while the opening request waits

    def headers(self, *, initialize: bool = False) -> dict[str, str]:
        """The MCP headers for a request (``initialize`` starts a session: none of them)."""
        headers: dict[str, str] = {}
        if not initialize:
            if self.session_id:
                headers[SESSION_HEADER] = self.session_id
            if self.protocol_version:
                headers[jsonrpc.VERSION_HEADER] = self.protocol_version
        return headers

    def note_version(self, message: Any) -> None:
        """Remember the protocol version ``message`` names, if it names one a header can carry.

        Called as each line is read, so that a notification (which names no
        version) goes under the version of the messages the client sent before it.
        """
        version = jsonrpc.envelope_version(message)
        if version is not None and jsonrpc.header_safe(version):
            self.envelope_version = version

    def headers_for(self, message: Any, *, initialize: bool = False) -> dict[str, str]:
        """The MCP headers for ``message``: the session's, or those its own protocol version asks for.

        A client on MCP 2026-07-28 or later names the version in each message
        and opens no session; such a message carries the routing headers that
        repeat its version, method and name. Its notifications (which name no
        version) go under the version the client last named (`note_version`),
        so the hub acknowledges them instead of asking for a session. Raises
        `sonde.bridge.jsonrpc.Unroutable`.
        """
        if message is None:  # a replayed handshake: the session's own headers
            return self.headers(initialize=initialize)
        version = jsonrpc.envelope_version(message)
        if version is None and self.session_id is None and not jsonrpc.request_ids(message):
            version = self.envelope_version or None
        if version is None:
            return self.headers(initialize=initialize)
        return jsonrpc.routing_headers(message, version)

    def silence_limit(self, read_s: float | None) -> httpx2.Timeout:
        """The client's timeouts, but for how long the hub may send nothing (None: no limit)."""
        default = self.client.timeout
        return httpx2.Timeout(connect=default.connect, read=read_s, write=default.write, pool=default.pool)

    @asynccontextmanager
    async def post(
        self, body: bytes, message: Any = None, *, initialize: bool = False, silence_s: float | None = None
    ) -> AsyncIterator[httpx2.Response]:
        """POST one message (``message``, parsed, picks the headers); the caller reads the response's body.

        ``silence_s`` bounds each wait for bytes from the hub (None: the client's
        default); a hub silent that long raises `httpx2.ReadTimeout`. Raises
        `sonde.bridge.jsonrpc.Unroutable` before anything is sent.
        """
        headers = {
            "Accept": POST_ACCEPT,
            "Content-Type": "application/json",
            **self.headers_for(message, initialize=initialize),
        }
        timeout = self.client.timeout if silence_s is None else self.silence_limit(silence_s)
        answered = False
        try:
            async with self.client.stream(
                "POST", self.url, content=body, headers=headers, timeout=timeout
            ) as response:
                answered = True
                if initialize and is_success(response):
                    self._opened = True
                    self.session_id = response.headers.get(SESSION_HEADER) or None
                    self.protocol_version = None
                    log.info("hub session %s", self.session_id or "(none: the hub keeps no sessions)")
                yield response
        except DROPPED as exc:
            if answered:
                raise
            raise ConnectionDropped(f"{type(exc).__name__}: {exc}") from exc

    def remember_initialize(self, request_id: Any, body: bytes) -> None:
        self._initialize = (request_id, body)

    def answered_initialize(self, message: Any) -> bool:
        """Note the version if ``message`` answers the client's `initialize`; True if it does."""
        if self._initialize is None or not isinstance(message, dict):
            return False
        version = jsonrpc.negotiated_version(message, self._initialize[0])
        if version is not None:
            self.protocol_version = version
        return version is not None

    def initialized(self, body: bytes) -> None:
        """The client's ``notifications/initialized`` was accepted: the session is ready."""
        self._initialized = body
        self._new_generation()

    def _new_generation(self) -> None:
        self.generation += 1
        self._ready.set()
        self._ready = trio.Event()

    async def wait_changed(self, generation: int) -> int:
        """Wait until the session generation is past ``generation``; return the new one."""
        while self.generation <= generation:
            await self._ready.wait()
        return self.generation

    def never_opened(self) -> bool:
        """The client's `initialize` failed (the hub was down, or refused it) and it went on
        regardless: its requests carry no session, which the hub answers 400, until one is opened."""
        return not self._opened and self._initialize is not None and self.envelope_version is None

    async def renew_key(self, sent: str) -> bool:
        """After the hub refused the key ``sent``: switch to a newer one, if there is one (`ApiKey.renewed`)."""
        if not await self.key.renewed(sent):
            return False
        self.client.headers["Authorization"] = f"Bearer {self.key.value}"
        return True

    async def reinitialize(self, seen_generation: int, why: str = "") -> bool:
        """Open a new session by replaying the client's `initialize` and `initialized`.

        Called after a 404 for a request sent under ``seen_generation`` (or a 400 while
        `never_opened`, or a new key: ``why`` says so in the log); if another request already re-initialized since, this only says
        so. Returns whether there is a fresh session to retry in.
        """
        async with self._reinitializing:
            if self.generation != seen_generation:
                return True
            if self._initialize is None:
                return False
            initialized = self._initialized
            if why:
                log.warning("%s; opening a new session", why)
            elif self._opened:
                log.warning("the hub no longer knows session %s (HTTP 404); re-initializing", self.session_id)
            else:
                log.warning("no hub session yet (the client's initialize failed); initializing now")
                initialized = initialized or INITIALIZED
            try:
                ok = await self._replay_handshake(*self._initialize, initialized)
            except TRANSPORT_ERRORS as exc:
                log.error("re-initializing failed: %s: %s", type(exc).__name__, exc)
                return False
            if ok:
                self._new_generation()
            return ok

    async def _replay_handshake(self, request_id: Any, initialize: bytes, initialized: bytes | None) -> bool:
        answered = False

        async def take(message: Any) -> bool:
            nonlocal answered
            answered = self.answered_initialize(message)
            return answered or (isinstance(message, dict) and message.get("id") == request_id)

        async with self.post(initialize, initialize=True) as response:
            if not is_success(response):
                log.error("re-initializing failed: the hub answered %s", describe_status(response))
                return False
            await read_messages(response, take)
        if not answered:
            log.error("re-initializing failed: the hub did not accept the replayed initialize")
            return False
        if initialized is None:
            return True  # the request being retried is the client's initialized itself
        async with self.post(initialized) as response:
            if not is_success(response):
                log.error("re-initializing failed: initialized got %s", describe_status(response))
                return False
        return True

    @asynccontextmanager
    async def listen(self, last_event_id: str, *, silence_s: float | None) -> AsyncIterator[httpx2.Response]:
        """Open a GET stream: the standalone one for server-initiated messages, or with
        ``last_event_id`` the rest of an answer. ``silence_s`` bounds each wait for bytes
        (None: no limit, for the standalone stream, which may stay quiet for hours)."""
        headers = {"Accept": "text/event-stream", **self.headers()}
        if last_event_id:
            headers[LAST_EVENT_ID_HEADER] = last_event_id
        async with self.client.stream(
            "GET", self.url, headers=headers, timeout=self.silence_limit(silence_s)
        ) as response:
            yield response

    async def end(self) -> None:
        """``DELETE`` the session, if there is one; failures are only logged."""
        if not self.session_id:
            return
        try:
            response = await self.client.delete(self.url, headers=self.headers())
        except httpx2.HTTPError as exc:
            log.warning("could not end session %s: %s: %s", self.session_id, type(exc).__name__, exc)
            return
        if response.status_code == 405:
            log.debug("the hub does not let clients end sessions")
        elif response.status_code == 404:  # a hub restarted since: nothing left to end
            log.info("session %s had already ended on the hub (it restarted since?)", self.session_id)
        elif not is_success(response):
            log.warning("ending session %s: the hub answered %s", self.session_id, describe_status(response))
        else:
            log.info("ended session %s", self.session_id)

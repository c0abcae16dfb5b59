"""The bridge proper: stdio JSON-RPC lines in, POSTs to the hub's ``/mcp``, lines out.

How it runs (one nursery, one writer of stdout):

- the stdin reader parses each line only enough to know its kind. A request
  gets its own task, so a slow tool call never holds up the next request and
  answers go out in whatever order the hub gives them. A notification or a
  response is POSTed in line, after the requests before it have reached the
  hub (their response headers are in), so a ``notifications/cancelled`` can
  never overtake the request it cancels;
- each POST's answer, JSON or SSE, is parsed as it arrives and every message
  in it (progress notifications included) goes to stdout as one line; an SSE
  answer that breaks off before its response is resumed from its last event id
  (``GET`` with ``Last-Event-ID``);
- a client on the session-less revision (MCP 2026-07-28) names the version in
  each message; `HubSession.headers_for` turns that into the routing headers
  the hub checks, and a cancelled request's POST is simply closed;
- the standalone GET stream carries what the hub sends outside any request;
- anything that goes wrong becomes a JSON-RPC error ``-32603`` for the request
  it hit (naming the HTTP status, or the network error), and a line on stderr.

On stdin EOF it gives requests in flight `EOF_DRAIN_S` to finish, then the
session is DELETEd; cancelling `bridge_stdio` (on SIGTERM or SIGINT) DELETEs it
too.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from typing import Any

import httpx2
import trio

from sonde import __version__
from sonde.bridge import jsonrpc
from sonde.bridge.hub_session import (
    Deliver,
    HubAnswerError,
    HubSession,
    describe_status,
    error_detail,
    is_success,
    read_event_stream,
    read_messages,
)
from sonde.bridge.settings import BridgeSettings
from sonde.bridge.sse import SSEError, SSEParser
from sonde.bridge.stdio import LineTooLong, read_lines, write_lines
from sonde.connect_failures import describe_failure

log = logging.getLogger(__name__)

MAX_REQUESTS_IN_FLIGHT = 64
OUTPUT_QUEUE_LINES = 16
ORDER_WAIT_S = 2.0  # how long a notification waits for earlier requests to reach the hub
EOF_DRAIN_S = 1.0  # under the 2 s an MCP client waits for a server to exit after closing stdin
DELETE_TIMEOUT_S = 3.0
FLUSH_TIMEOUT_S = 2.0
GET_RETRY_DEFAULT_S = 1.0
GET_MAX_FAILURES = 3
RESUME_ATTEMPTS = 3  # GETs with Last-Event-ID for one answer whose stream broke off
RESUME_DELAY_S = 0.5  # before each, unless the stream named its own retry
HTTP_TIMEOUT = httpx2.Timeout(connect=10.0, read=None, write=30.0, pool=None)
TRANSPORT_ERRORS = (httpx2.HTTPError, httpx2.StreamError, HubAnswerError, SSEError)


class Forwarder:
    """Moves messages between the client's lines and one `HubSession`."""

    def __init__(self, hub: HubSession, output: trio.MemorySendChannel[bytes]) -> None:
        self.hub = hub
        self.output = output
        self._in_flight = trio.Semaphore(MAX_REQUESTS_IN_FLIGHT)
        self._not_at_hub: set[trio.Event] = set()  # requests whose response headers are not in yet
        self._request_scopes: dict[str, trio.CancelScope] = {}
        self._requests_running = 0
        self._idle = trio.Event()
        self._idle.set()

    # -- the client's side

    async def read_client(self, stdin: trio.abc.ReceiveStream, nursery: trio.Nursery) -> None:
        """Forward every line from stdin until EOF; requests run in ``nursery``."""
        async with aclosing(read_lines(stdin)) as lines:
            async for line in lines:
                if isinstance(line, LineTooLong):
                    log.error("%s", line)
                    await self.send(jsonrpc.error_answer(None, f"Parse error: {line}", jsonrpc.PARSE_ERROR))
                    continue
                await self.take_line(line, nursery)
        log.info("stdin closed")

    async def take_line(self, line: bytes, nursery: trio.Nursery) -> None:
        try:
            message = jsonrpc.parse_line(line)
        except jsonrpc.NotJsonRpc as exc:
            log.error("stdin: %s: %.200r", exc, line)
            await self.send(jsonrpc.error_answer(None, f"Parse error: {exc}", jsonrpc.PARSE_ERROR))
            return
        ids = jsonrpc.request_ids(message)
        if not ids:
            await self.forward_in_line(message, line)
            return
        await self._in_flight.acquire()
        at_hub = trio.Event()
        self._not_at_hub.add(at_hub)
        if self._requests_running == 0:
            self._idle = trio.Event()
        self._requests_running += 1
        nursery.start_soon(self.forward_request, message, line, ids, at_hub)

    async def send(self, message: Any) -> None:
        await self.output.send(jsonrpc.as_line(message))

    async def wait_idle(self) -> None:
        """Return once no request is in flight."""
        await self._idle.wait()

    # -- forwarding

    async def forward_request(self, message: Any, body: bytes, ids: list[Any], at_hub: trio.Event) -> None:
        scope = trio.CancelScope()
        keys = [jsonrpc.id_key(i) for i in ids]
        for key in keys:
            self._request_scopes[key] = scope
        try:
            with scope:
                if jsonrpc.is_initialize(message):
                    self.hub.remember_initialize(message["id"], body)
                await self.forward(message, body, ids, at_hub)
        finally:
            at_hub.set()
            self._not_at_hub.discard(at_hub)
            for key in keys:
                if self._request_scopes.get(key) is scope:
                    del self._request_scopes[key]
            self._in_flight.release()
            self._requests_running -= 1
            if self._requests_running == 0:
                self._idle.set()

    async def forward_in_line(self, message: Any, body: bytes) -> None:
        """A notification or a response: after earlier requests reach the hub, POST it and wait."""
        with trio.move_on_after(ORDER_WAIT_S):
            for event in list(self._not_at_hub):
                await event.wait()
        await self.forward(message, body, [], trio.Event())
        cancelled = jsonrpc.cancelled_request_id(message)
        if cancelled is not None and (scope := self._request_scopes.get(jsonrpc.id_key(cancelled))):
            scope.cancel()  # the client gave up on it: stop reading its answer

    async def forward(self, message: Any, body: bytes, ids: list[Any], at_hub: trio.Event) -> None:
        """POST ``body``; relay the answer, or answer each id in ``ids`` with an error."""
        waiting = {jsonrpc.id_key(i): i for i in ids}
        try:
            await self.post_and_relay(message, body, waiting, at_hub, may_reinitialize=True)
        except TRANSPORT_ERRORS as exc:
            reason = f"cannot reach the Sonde hub at {self.hub.url}: {describe_failure(exc)}"
            if isinstance(exc, HubAnswerError | SSEError):
                reason = f"bad answer from the Sonde hub at {self.hub.url}: {exc}"
            await self.fail(waiting, reason, {"url": self.hub.url})
            return
        if waiting:
            await self.fail(waiting, "the Sonde hub ended its answer without a response to this request")

    async def post_and_relay(
        self,
        message: Any,
        body: bytes,
        waiting: dict[str, Any],
        at_hub: trio.Event,
        *,
        may_reinitialize: bool,
    ) -> None:
        initialize = jsonrpc.is_initialize(message)
        generation = self.hub.generation
        async with self.hub.post(body, message, initialize=initialize) as response:
            if not initialize:  # what follows an initialize waits for its answer: the version is in it
                at_hub.set()
            expired = response.status_code == 404 and self.hub.session_id is not None and not initialize
            unopened = response.status_code == 400 and self.hub.never_opened() and not initialize
            if not ((expired or unopened) and may_reinitialize):
                await self.answer(message, body, response, waiting)
                return
        # the hub forgot the session, or none was ever opened: a new one, then this message again (once)
        if await self.hub.reinitialize(generation):
            await self.post_and_relay(message, body, waiting, trio.Event(), may_reinitialize=False)
        elif expired:
            await self.fail(
                waiting,
                "the Sonde hub answered HTTP 404 Not Found: the session expired and re-initializing failed",
                {"httpStatus": 404},
            )
        else:
            await self.fail(
                waiting,
                "the Sonde hub answered HTTP 400 Bad Request: there is no session (the client's initialize "
                "failed) and opening one now failed too; see the bridge's log",
                {"httpStatus": 400},
            )

    async def answer(
        self, message: Any, body: bytes, response: httpx2.Response, waiting: dict[str, Any]
    ) -> None:
        """Turn the hub's response to ``message`` into lines for the client."""
        if not is_success(response):
            await self.http_failure(response, waiting)
        elif response.status_code == 202:
            if waiting:
                reason = "the Sonde hub answered HTTP 202 Accepted, with no response to the request"
                await self.fail(waiting, reason, {"httpStatus": 202})
        else:
            await self.relay(response, waiting, initialize=jsonrpc.is_initialize(message))
        if is_success(response) and jsonrpc.is_initialized(message):
            self.hub.initialized(body)

    async def relay(self, response: httpx2.Response, waiting: dict[str, Any], *, initialize: bool) -> None:
        """Send every message in a 2xx answer to the client; stop once ``waiting`` is answered.

        An event stream that breaks off, or ends, before the answer is picked up
        again from its last event id, when it had one (`resume`).
        """

        async def deliver(message: Any) -> bool:
            for item in message if isinstance(message, list) else [message]:
                if isinstance(item, dict) and "method" not in item and "id" in item:
                    waiting.pop(jsonrpc.id_key(item["id"]), None)
                    if initialize:
                        self.hub.answered_initialize(item)
            await self.send(message)
            return not waiting

        parser = SSEParser()
        try:
            await read_messages(response, deliver, parser)
        except TRANSPORT_ERRORS as exc:
            if not self.resumable(parser, waiting):
                raise
            log.warning("the hub's answer stream broke off (%s)", describe_failure(exc))
        if self.resumable(parser, waiting):
            await self.resume(parser, deliver, waiting)

    def resumable(self, parser: SSEParser, waiting: dict[str, Any]) -> bool:
        return bool(waiting) and parser.last_event_id != "" and self.hub.session_id is not None

    async def resume(self, parser: SSEParser, deliver: Deliver, waiting: dict[str, Any]) -> None:
        """``GET`` with ``Last-Event-ID`` until ``waiting`` is answered, a few times at most."""
        failure: BaseException | None = None
        for attempt in range(1, RESUME_ATTEMPTS + 1):
            await trio.sleep(parser.retry_ms / 1000 if parser.retry_ms is not None else RESUME_DELAY_S)
            log.info("resuming the answer after event %s (attempt %d)", parser.last_event_id, attempt)
            try:
                async with self.hub.listen(parser.last_event_id) as resumed:
                    if not is_success(resumed):
                        raise HubAnswerError(f"resuming, the hub answered {describe_status(resumed)}")
                    await read_event_stream(resumed, deliver, parser)
            except TRANSPORT_ERRORS as exc:
                failure = exc
                log.warning("resuming failed: %s", describe_failure(exc))
            if not waiting:
                return
        if failure is not None:
            raise failure

    async def http_failure(self, response: httpx2.Response, waiting: dict[str, Any]) -> None:
        status = describe_status(response)
        detail = await error_detail(response)
        reason = f"the Sonde hub answered {status}" + (f": {detail}" if detail else "")
        await self.fail(waiting, reason, {"httpStatus": response.status_code})

    async def fail(self, waiting: dict[str, Any], reason: str, data: Any = None) -> None:
        log.error("%s", reason)
        for request_id in waiting.values():
            await self.send(jsonrpc.error_answer(request_id, reason, data=data))
        waiting.clear()

    # -- the hub's side

    async def listen(self) -> None:
        """Relay the standalone GET stream of each session, from the moment it is ready."""
        generation = 0
        while True:
            generation = await self.hub.wait_changed(generation)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.relay_get_stream)
                await self.hub.wait_changed(generation)  # a newer session replaces this one
                nursery.cancel_scope.cancel()

    async def relay_get_stream(self) -> None:
        """Open the GET stream and relay it, reconnecting (with Last-Event-ID) when it drops."""
        parser, failures = SSEParser(), 0
        while failures < GET_MAX_FAILURES:
            try:
                async with self.hub.listen(parser.last_event_id) as response:
                    if not is_success(response):
                        if response.status_code != 405:  # 405: the hub has no GET stream
                            log.warning("GET stream refused: %s", describe_status(response))
                        return
                    failures = 0
                    await read_event_stream(response, self.deliver_server_message, parser)
            except TRANSPORT_ERRORS as exc:
                failures += 1
                log.debug("GET stream dropped: %s", describe_failure(exc))
            await trio.sleep(parser.retry_ms / 1000 if parser.retry_ms is not None else GET_RETRY_DEFAULT_S)
        log.warning("GET stream lost %d times; messages outside requests wait for a new session", failures)

    async def deliver_server_message(self, message: Any) -> bool:
        await self.send(message)
        return False


async def bridge_stdio(
    settings: BridgeSettings, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream
) -> None:
    """Bridge ``stdin``/``stdout`` to the hub until stdin ends; cancel it to stop early.

    Either way the session is DELETEd (shielded, at most `DELETE_TIMEOUT_S`).
    A client that closes its end of stdout ends the bridge the same way.
    """
    headers = {"Authorization": f"Bearer {settings.api_key}", "User-Agent": f"sonde-mcp-bridge/{__version__}"}
    async with httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT) as client:
        hub = HubSession(client, settings.mcp_url)
        try:
            await run_forwarder(hub, stdin, stdout)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(DELETE_TIMEOUT_S):
                await hub.end()


async def run_forwarder(hub: HubSession, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream) -> None:
    send_lines, receive_lines = trio.open_memory_channel[bytes](OUTPUT_QUEUE_LINES)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_until_broken, receive_lines, stdout, nursery.cancel_scope)
        forwarder = Forwarder(hub, send_lines)
        async with trio.open_nursery() as work:
            work.start_soon(forwarder.listen)
            await forwarder.read_client(stdin, work)
            with trio.move_on_after(EOF_DRAIN_S):
                await forwarder.wait_idle()
            work.cancel_scope.cancel()
        send_lines.close()
        nursery.cancel_scope.deadline = trio.current_time() + FLUSH_TIMEOUT_S


async def write_until_broken(
    lines: trio.MemoryReceiveChannel[bytes], stdout: trio.abc.SendStream, scope: trio.CancelScope
) -> None:
    try:
        await write_lines(lines, stdout)
    except trio.BrokenResourceError:
        log.info("the client closed stdout; stopping")
        scope.cancel()

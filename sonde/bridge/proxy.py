"""The bridge proper: stdio JSON-RPC lines in, POSTs to the hub's ``/mcp``, lines out.

How it runs (one nursery, one writer of stdout):

- the stdin reader parses each line only enough to know its kind and never waits on the network,
  so a cancel, a ping or EOF is seen however the hub behaves. Each message is POSTed by a task of
  its own (`Tracker` keeps count and order): a slow tool call never holds up the next request,
  and answers go out in whatever order the hub gives them;
- what MCP needs in order is kept, nothing more: notifications and responses
  go one at a time in the client's order (the hub acknowledges each at once),
  a request goes after those read before it, anything after the client's
  ``initialize`` waits for its answer (the session and version are in it),
  and a ``notifications/cancelled`` closes its request's POST at once (the hub
  cancels a call whose client goes) and follows it;
- the bridge answers what it cannot forward itself: a JSON-RPC batch, a second request with an
  id still in flight, a request past the bridge's limit of requests in flight
  (`sonde.bridge.tracker`), a version or a method no HTTP header can carry;
- each POST's answer, JSON or SSE, is parsed as it arrives and every message
  in it (progress notifications included) goes to stdout as one line; an SSE
  answer that breaks off before its response is resumed from its last event id
  (``GET`` with ``Last-Event-ID``);
- a client on the session-less revision (MCP 2026-07-28) names the version in
  each message; `HubSession.headers_for` turns that into the routing headers
  the hub checks, and a cancelled request's POST is simply closed;
- the standalone GET stream carries what the hub sends outside any request;
- anything that goes wrong becomes a JSON-RPC error ``-32603`` for the request
  it hit (naming the HTTP status, the network error, or how long the hub said
  nothing: `HubPatience`), and a line on stderr.

On stdin EOF it gives what is in flight `EOF_DRAIN_S` to finish, answers each request still open with
an error (named on stderr), writes what is left within `FLUSH_AFTER_EOF_S`, then DELETEs the session;
cancelling `bridge_stdio` (on SIGTERM or SIGINT) DELETEs it too.
"""

from __future__ import annotations

import logging
from contextlib import aclosing
from functools import partial
from typing import Any

import httpx2
import trio

from sonde import __version__
from sonde.bridge import jsonrpc
from sonde.bridge.api_key import ApiKey
from sonde.bridge.hub_failures import REOPENING_FAILED, describe_post_failure, describe_refusal
from sonde.bridge.hub_retry import again_if_dropped, opens_the_session, wait_for_hub
from sonde.bridge.hub_session import (
    TRANSPORT_ERRORS,
    AnswerBrokeOff,
    Deliver,
    HubAnswerError,
    HubPatience,
    HubSession,
    describe_status,
    is_success,
    read_event_stream,
    read_messages,
)
from sonde.bridge.hub_watch import HubUnresponsive, while_hub_answers
from sonde.bridge.server_stream import relay_server_stream
from sonde.bridge.settings import BridgeSettings
from sonde.bridge.sse import SSEParser
from sonde.bridge.stdio import LineTooLong, read_lines, write_lines
from sonde.bridge.tracker import ClientRequest, Tracker
from sonde.connect_failures import describe_failure

log = logging.getLogger(__name__)

OUTPUT_QUEUE_LINES = 16
EOF_DRAIN_S = 1.0  # under the 2 s an MCP client waits for a server to exit after closing stdin
DELETE_TIMEOUT_S = 0.8  # with EOF_DRAIN_S, under those 2 s: a healthy hub answers in milliseconds
FLUSH_AFTER_EOF_S = 0.2  # to write what is left after the drain: ms to a reader; a non-reader took 5 s
RESUME_ATTEMPTS = 3  # GETs with Last-Event-ID for one answer whose stream broke off
RESUME_DELAY_S = 0.5  # before each, unless the stream named its own retry


class Forwarder:
    """Moves messages between the client's lines and one `HubSession`."""

    def __init__(
        self, hub: HubSession, output: trio.MemorySendChannel[bytes], patience: HubPatience | None = None
    ) -> None:
        self.hub = hub
        self.output = output
        self.patience = patience or HubPatience()
        self.tracker = Tracker()

    # -- the client's side

    async def read_client(self, stdin: trio.abc.ReceiveStream, nursery: trio.Nursery) -> None:
        """Forward every line from stdin until EOF; each message is POSTed by a task in ``nursery``."""
        async with aclosing(read_lines(stdin)) as lines:
            async for line in lines:
                if isinstance(line, LineTooLong):
                    log.error("%s", line)
                    await self.send(jsonrpc.error_answer(None, f"Parse error: {line}", jsonrpc.PARSE_ERROR))
                    continue
                await self.take_line(line, nursery)
        log.info("stdin closed")

    async def take_line(self, line: bytes, nursery: trio.Nursery) -> None:
        """Start forwarding one line, or answer it at once; never waits on the hub."""
        try:
            message = jsonrpc.parse_line(line)
        except jsonrpc.NotJsonRpc as exc:
            log.error("stdin: %s: %.200r", exc, line)
            for request_id in exc.ids or [None]:
                await self.send(jsonrpc.error_answer(request_id, exc.answer(), exc.code))
            return
        self.hub.note_version(message)
        ids = jsonrpc.request_ids(message)
        if not ids:
            self.take_other(message, line, nursery)
            return
        refused = self.tracker.refusal(ids)
        if refused is not None:
            reason, code = refused
            log.error("%s", reason)
            for request_id in ids:
                await self.send(jsonrpc.error_answer(request_id, reason, code))
            return
        request, after = self.tracker.start_request(ids, initialize=jsonrpc.is_initialize(message))
        nursery.start_soon(self.forward_request, message, line, request, after)

    def take_other(self, message: Any, body: bytes, nursery: trio.Nursery) -> None:
        """A notification or a response to the hub: a task POSTs it in turn; a cancel takes effect now."""
        cancelled = jsonrpc.cancelled_request_id(message)
        # the client gave up on that request: its POST is closed at once, and this follows it
        ended = self.tracker.cancel(cancelled) if cancelled is not None else None
        started = self.tracker.start_other(ended)
        if started is None:
            log.error(
                "dropped a %s from the client: %d messages already wait for the hub to take them",
                jsonrpc.method_of(message) or "response",
                self.tracker.others_waiting,
            )
            return
        nursery.start_soon(self.forward_other, message, body, *started)

    async def send(self, message: Any) -> None:
        await self.output.send(jsonrpc.as_line(message))

    async def wait_idle(self) -> None:
        """Return once nothing the client sent is still being forwarded."""
        await self.tracker.wait_idle()

    async def abandon(self, requests: list[ClientRequest], others_unsent: int) -> None:
        """After EOF: name each request of ``requests`` still unanswered on stderr, and answer it."""
        left = [
            request_id
            for request in requests
            if not request.cancelled
            for request_id in request.waiting.values()
        ]
        if others_unsent:
            log.error("stdin closed with %d notifications or responses the hub had not taken", others_unsent)
        if not left:
            return
        log.error(
            "stdin closed with %d request%s unanswered after %g s; abandoned: %.2000s",
            len(left),
            "" if len(left) == 1 else "s",
            EOF_DRAIN_S,
            ", ".join(jsonrpc.as_text(i) for i in left),
        )
        outage = f" (it cannot be reached: {self.hub.outage})" if self.hub.outage else ""
        reason = f"the bridge is exiting: stdin closed and the hub had not answered within {EOF_DRAIN_S:g} s{outage}"
        for request_id in left:
            await self.send(jsonrpc.error_answer(request_id, reason))

    # -- forwarding

    async def forward_request(
        self, message: Any, body: bytes, request: ClientRequest, after: list[trio.Event]
    ) -> None:
        try:
            with request.scope:
                for event in after:
                    await event.wait()
                if jsonrpc.is_initialize(message):
                    self.hub.remember_initialize(message["id"], body)
                await self.forward(message, body, request.waiting)
        finally:
            self.tracker.end_request(request)

    async def forward_other(
        self, message: Any, body: bytes, after: list[trio.Event], done: trio.Event
    ) -> None:
        try:
            for event in after:
                await event.wait()
            await self.forward(message, body, {})
        finally:
            self.tracker.end_other(done)

    async def forward(self, message: Any, body: bytes, waiting: dict[str, Any]) -> None:
        """POST ``body``; relay the answer, or answer each id still in ``waiting`` with an error."""
        silence_s = self.patience.for_message(message)
        post = partial(self.post_and_relay, message, body, waiting, silence_s, may_reinitialize=True)
        attempt = partial(again_if_dropped, post, self.hub.url)
        if opens_the_session(message):
            attempt = partial(wait_for_hub, attempt, self.hub)
        elif silence_s > self.patience.answer_s:  # a tool call: its hub watched while it waits
            attempt = partial(while_hub_answers, attempt, self.hub.client, self.hub.url.removesuffix("/mcp"))
        try:
            await attempt()
        except jsonrpc.Unroutable as exc:
            await self.fail(waiting, str(exc), code=exc.code)
            return
        except (*TRANSPORT_ERRORS, HubUnresponsive) as exc:
            await self.fail(
                waiting, describe_post_failure(exc, self.hub.url, silence_s), {"url": self.hub.url}
            )
            return
        if waiting:
            await self.fail(waiting, "the Sonde hub ended its answer without a response to this request")

    async def post_and_relay(
        self,
        message: Any,
        body: bytes,
        waiting: dict[str, Any],
        silence_s: float,
        *,
        may_reinitialize: bool,
    ) -> None:
        initialize = jsonrpc.is_initialize(message)
        generation, sent_key = self.hub.generation, self.hub.key.value
        async with self.hub.post(body, message, initialize=initialize, silence_s=silence_s) as response:
            expired = response.status_code == 404 and self.hub.session_id is not None and not initialize
            unopened = response.status_code == 400 and self.hub.never_opened() and not initialize
            renewed = response.status_code == 401 and may_reinitialize and await self.hub.renew_key(sent_key)
            if not (((expired or unopened) and may_reinitialize) or renewed):
                await self.answer(message, body, response, waiting, silence_s)
                return
        # the hub forgot the session, none was ever opened, or the key is new: a new one, then this again (once)
        status = 401 if renewed else 404 if expired else 400
        why = "the hub refused the old API key" if renewed else ""
        if (renewed and (initialize or self.hub.session_id is None)) or await self.hub.reinitialize(
            generation, why
        ):
            await self.post_and_relay(message, body, waiting, silence_s, may_reinitialize=False)
        else:
            await self.fail(waiting, REOPENING_FAILED[status], {"httpStatus": status})

    async def answer(
        self, message: Any, body: bytes, response: httpx2.Response, waiting: dict[str, Any], silence_s: float
    ) -> None:
        """Turn the hub's response to ``message`` into lines for the client."""
        if not is_success(response):
            await self.http_failure(response, waiting)
        elif response.status_code == 202:
            if waiting:
                reason = "the Sonde hub answered HTTP 202 Accepted, with no response to the request"
                await self.fail(waiting, reason, {"httpStatus": 202})
        else:
            await self.relay(response, waiting, silence_s, initialize=jsonrpc.is_initialize(message))
        if is_success(response) and jsonrpc.is_initialized(message):
            self.hub.initialized(body)

    async def relay(
        self, response: httpx2.Response, waiting: dict[str, Any], silence_s: float, *, initialize: bool
    ) -> None:
        """Send every message in a 2xx answer to the client; stop once ``waiting`` is answered.

        An event stream that breaks off, or ends, before the answer is picked up
        again from its last event id, when it had one (`resume`); one that went
        silent past ``silence_s`` is not (a hub that stopped answering).
        """

        async def deliver(message: Any) -> bool:
            answered = []
            for item in message if isinstance(message, list) else [message]:
                if isinstance(item, dict) and "method" not in item and "id" in item:
                    answered.append(jsonrpc.id_key(item["id"]))
                    if initialize:
                        self.hub.answered_initialize(item)
            await self.send(message)
            for key in answered:  # only once sent: an id left in `waiting` is answered at EOF
                waiting.pop(key, None)
            return not waiting

        parser = SSEParser()
        try:
            await read_messages(response, deliver, parser)
        except TRANSPORT_ERRORS as exc:
            if isinstance(exc, httpx2.ReadTimeout) or not self.resumable(parser, waiting):
                raise
            log.warning("the hub's answer stream broke off (%s)", describe_failure(exc))
        if self.resumable(parser, waiting):
            await self.resume(parser, deliver, waiting, silence_s)

    def resumable(self, parser: SSEParser, waiting: dict[str, Any]) -> bool:
        return bool(waiting) and parser.last_event_id != "" and self.hub.session_id is not None

    async def resume(
        self, parser: SSEParser, deliver: Deliver, waiting: dict[str, Any], silence_s: float
    ) -> None:
        """``GET`` with ``Last-Event-ID`` until ``waiting`` is answered, a few times at most."""
        failure: BaseException | None = None
        for attempt in range(1, RESUME_ATTEMPTS + 1):
            await trio.sleep(parser.retry_ms / 1000 if parser.retry_ms is not None else RESUME_DELAY_S)
            log.info("resuming the answer after event %s (attempt %d)", parser.last_event_id, attempt)
            try:
                async with self.hub.listen(parser.last_event_id, silence_s=silence_s) as resumed:
                    if not is_success(resumed):
                        raise HubAnswerError(f"resuming, the hub answered {describe_status(resumed)}")
                    await read_event_stream(resumed, deliver, parser)
            except TRANSPORT_ERRORS as exc:
                failure = exc
                log.warning("resuming failed: %s", describe_failure(exc))
            if not waiting:
                return
        if failure is not None:  # the hub had the request: not "cannot reach", nor sent again
            raise AnswerBrokeOff(describe_failure(failure)) from failure

    async def http_failure(self, response: httpx2.Response, waiting: dict[str, Any]) -> None:
        reason = await describe_refusal(response, self.hub.url.removesuffix("/mcp"))
        if response.status_code == 401:
            reason = f"{reason}; {self.hub.key.refused(reason)}"
        await self.fail(waiting, reason, {"httpStatus": response.status_code})

    async def fail(
        self, waiting: dict[str, Any], reason: str, data: Any = None, code: int = jsonrpc.INTERNAL_ERROR
    ) -> None:
        """Log ``reason`` and answer each id in ``waiting`` with it (removed as it is sent)."""
        log.error("%s", reason)
        for key, request_id in list(waiting.items()):
            await self.send(jsonrpc.error_answer(request_id, reason, code, data))
            del waiting[key]

    # -- what the hub sends outside any request

    async def listen(self) -> None:
        await relay_server_stream(self.hub, self.send)


async def bridge_stdio(
    settings: BridgeSettings,
    stdin: trio.abc.ReceiveStream,
    stdout: trio.abc.SendStream,
    patience: HubPatience | None = None,
) -> None:
    """Bridge ``stdin``/``stdout`` to the hub until stdin ends; cancel it to stop early.

    Either way the session is DELETEd (shielded, at most `DELETE_TIMEOUT_S`).
    A client that closes its end of stdout ends the bridge the same way.
    ``patience``: how long the hub may say nothing (the defaults of `HubPatience`).
    """
    patience = patience or HubPatience()
    headers = {"Authorization": f"Bearer {settings.api_key}", "User-Agent": f"sonde-mcp-bridge/{__version__}"}
    async with httpx2.AsyncClient(headers=headers, timeout=patience.client_timeout()) as client:
        key = ApiKey(settings.api_key, settings.key_origin, settings.key_file, settings.hub_url)
        hub = HubSession(client, settings.mcp_url, key)
        try:
            await run_forwarder(hub, stdin, stdout, patience)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(DELETE_TIMEOUT_S) as scope:
                await hub.end()
            if scope.cancelled_caught:
                log.warning(
                    "the hub did not answer the DELETE of session %s within %g s; it expires on the hub "
                    "by itself",
                    hub.session_id,
                    DELETE_TIMEOUT_S,
                )


async def run_forwarder(
    hub: HubSession, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream, patience: HubPatience
) -> None:
    send_lines, receive_lines = trio.open_memory_channel[bytes](OUTPUT_QUEUE_LINES)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_until_broken, receive_lines, stdout, nursery.cancel_scope)
        forwarder = Forwarder(hub, send_lines, patience)
        async with trio.open_nursery() as work:
            work.start_soon(forwarder.listen)
            await forwarder.read_client(stdin, work)
            with trio.move_on_after(EOF_DRAIN_S):
                await forwarder.wait_idle()
            left, others_unsent = forwarder.tracker.requests_running(), forwarder.tracker.others_waiting
            work.cancel_scope.cancel()
        flushed_by = trio.current_time() + FLUSH_AFTER_EOF_S
        with trio.move_on_at(flushed_by):  # a client that reads no more must not hold the exit
            await forwarder.abandon(left, others_unsent)
        send_lines.close()
        nursery.cancel_scope.deadline = flushed_by


async def write_until_broken(
    lines: trio.MemoryReceiveChannel[bytes], stdout: trio.abc.SendStream, scope: trio.CancelScope
) -> None:
    try:
        await write_lines(lines, stdout)
    except trio.BrokenResourceError:
        log.info("the client closed stdout; stopping")
        scope.cancel()
